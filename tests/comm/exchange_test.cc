// Gather, scatter and all-to-all (comm/exchange.h): every block lands where it belongs for every
// root, world size and transport, with empty blocks and blocks of many segments; split sizes
// that two ranks disagree on fail at once on both, naming the sizes.
#include "comm/exchange.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "comm/error.h"
#include "fault_peer.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Group;

// Byte i of the block that rank `from` has for rank `to`.
uint8_t blockByte(int from, int to, size_t i) {
  return static_cast<uint8_t>(i * 7 + static_cast<size_t>(from) * 31 + static_cast<size_t>(to) * 3 +
                              1);
}

std::string mismatchIn(const uint8_t* got, size_t bytes, int from, int to) {
  for (size_t i = 0; i < bytes; ++i) {
    if (got[i] != blockByte(from, to, i)) {
      return "block from " + std::to_string(from) + " to " + std::to_string(to) + " differs at " +
             std::to_string(i);
    }
  }
  return "";
}

class ExchangeOver : public ::testing::TestWithParam<std::tuple<int, Transport>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  CommunicatorOptions options() const {
    CommunicatorOptions o;
    o.transport = std::get<1>(GetParam());
    return o;
  }
};

// The block from `from` to `to`: empty when (from + to) % 3 == 0, of several 512 KiB segments when
// both are odd, small otherwise.
size_t blockBytes(int from, int to) {
  if ((from + to) % 3 == 0) return 0;
  if (from % 2 == 1 && to % 2 == 1) return (size_t(1) << 20) + 5;
  return static_cast<size_t>(from * 10 + to + 1);
}

TEST_P(ExchangeOver, AllToAllDeliversEveryUnevenBlock) {
  const int p = world();
  Group group(p, options());
  std::vector<std::string> failures(p);
  group.run([&](int rank, Communicator& comm) {
    std::vector<size_t> send(p), recv(p);
    std::vector<uint8_t> input, output;
    for (int j = 0; j < p; ++j) {
      send[j] = blockBytes(rank, j);
      recv[j] = blockBytes(j, rank);
      for (size_t i = 0; i < send[j]; ++i) input.push_back(blockByte(rank, j, i));
    }
    size_t total = 0;
    for (size_t r : recv) total += r;
    output.assign(total, 0);
    comm.allToAll(input.data(), send, output.data(), recv);
    size_t at = 0;
    for (int j = 0; j < p && failures[rank].empty(); ++j) {
      failures[rank] = mismatchIn(output.data() + at, recv[j], j, rank);
      at += recv[j];
    }
  });
  for (int r = 0; r < p; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

TEST_P(ExchangeOver, GatherAndScatterFromEveryRoot) {
  const int p = world();
  Group group(p, options());
  std::vector<std::string> failures(p);
  group.run([&](int rank, Communicator& comm) {
    for (size_t bytes : {size_t(0), size_t(5), (size_t(1) << 20) + 1}) {
      for (int root = 0; root < p && failures[rank].empty(); ++root) {
        std::vector<uint8_t> mine(bytes), all(rank == root ? bytes * p : 0);
        for (size_t i = 0; i < bytes; ++i) mine[i] = blockByte(rank, root, i);
        comm.gather(mine.data(), bytes, rank == root ? all.data() : nullptr, root);
        for (int r = 0; r < p && rank == root && failures[rank].empty(); ++r) {
          failures[rank] = "gather: " + mismatchIn(all.data() + r * bytes, bytes, r, root);
          if (failures[rank] == "gather: ") failures[rank].clear();
        }
        // Scatter back: block r of the root's input is what rank r should get.
        std::vector<uint8_t> blocks(rank == root ? bytes * p : 0), got(bytes);
        for (int r = 0; r < p && rank == root; ++r) {
          for (size_t i = 0; i < bytes; ++i) blocks[r * bytes + i] = blockByte(root, r, i);
        }
        comm.scatter(rank == root ? blocks.data() : nullptr, got.data(), bytes, root);
        if (failures[rank].empty()) {
          failures[rank] = mismatchIn(got.data(), bytes, root, rank);
          if (!failures[rank].empty()) failures[rank] = "scatter: " + failures[rank];
        }
      }
    }
  });
  for (int r = 0; r < p; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(World, ExchangeOver,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(Transport::kTcp, Transport::kShm)),
                         [](const auto& info) {
                           return "p" + std::to_string(std::get<0>(info.param)) + "_" +
                                  transportName(std::get<1>(info.param));
                         });

// Rank 0 expects 10 bytes from rank 1, which sends it none, and rank 1 expects 3 from rank 0,
// which sends none either: rank 0 fails at once naming both sizes (the length leads every block),
// and so does rank 1 (or, if rank 0 hung up first, with kPeerClosed) instead of waiting out its
// timeout.
TEST(Exchange, SplitSizesThatDisagreeFailAtOnceOnBothRanks) {
  Group group(2);
  std::vector<std::string> errors(2);
  group.run([&](int rank, Communicator& comm) {
    std::vector<uint8_t> input(16, 1), output(16, 0);
    const std::vector<size_t> send =
        rank == 0 ? std::vector<size_t>{2, 0} : std::vector<size_t>{0, 0};
    const std::vector<size_t> recv =
        rank == 0 ? std::vector<size_t>{2, 10} : std::vector<size_t>{3, 0};
    try {
      comm.allToAll(input.data(), send, output.data(), recv, OpOptions{600s});
    } catch (const CommError& e) {
      errors[rank] = e.what();
    }
  });
  EXPECT_EQ(errors[0],
            "all_to_all seq 1 with rank 1: invalid: rank 1 sends 0 bytes to rank 0, which expects "
            "10 (do all ranks pass matching split sizes?)");
  EXPECT_NE(errors[1], "");
}

TEST(Exchange, SplitSizesForAnotherWorldOrAnUnevenSelfBlockAreRefused) {
  Group group(1);
  uint8_t bytes[2] = {0, 0};
  CommError e = testing::expectCommError([&] { group.at(0).allToAll(bytes, {1, 1}, bytes, {1}); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
  EXPECT_STREQ(e.what(),
               "all_to_all seq 1: invalid: split sizes for 2 and 1 ranks in a world of 1");
  CommError self = testing::expectCommError([&] { group.at(0).allToAll(bytes, {2}, bytes, {1}); });
  EXPECT_STREQ(self.what(),
               "all_to_all seq 1: invalid: rank 0 sends itself 2 bytes but receives 1");
}

}  // namespace
}  // namespace cumulus::comm
