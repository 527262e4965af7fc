// The two-level all-reduce (comm/hierarchical.h) through the Communicator: the correctness
// matrix over H hosts × L ranks per host, simulated on this machine with distinct host ids (ranks
// of one fake host share memory, ranks of different ones meet over TCP); bit-identical repeats;
// the flat-ring fallback of an uneven layout; the topology the rendezvous collects; and a dead or
// stalled peer inside the host and across hosts.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "allreduce_values.h"
#include "comm/error.h"
#include "fault_peer.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::expectCommError;
using testing::fakeHosts;
using testing::Group;
using testing::spawn;
using Clock = std::chrono::steady_clock;

// (H, L)
class HierarchicalMatrix : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(HierarchicalMatrix, EveryCountDTypeAndOp) {
  const int H = std::get<0>(GetParam());
  const int L = std::get<1>(GetParam());
  const int p = H * L;
  CommunicatorOptions options;
  options.segment_bytes = 64 * 1024;  // several segments per chunk at the largest count
  Group group(p, options, fakeHosts(H, L));
  ASSERT_EQ(group.at(0).topology().hosts(), H);
  ASSERT_EQ(group.at(0).topology().localSize(), L);
  // 0; fewer elements than ranks, than hosts, than local ranks; odd; one that takes the shared-
  // memory slots (64 KiB segments of 2^18+3 elements).
  const std::vector<size_t> counts = {0, 1, size_t(p - 1), 7, 4097, (size_t(1) << 18) + 3};
  std::vector<std::string> failures(p);
  group.run([&](int rank, Communicator& comm) {
    failures[rank] = testing::checkAllreduceMatrix(comm, Algorithm::kHierarchical, counts);
  });
  for (int r = 0; r < p; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Layout, HierarchicalMatrix,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 2, 3)),
                         [](const auto& info) {
                           return "H" + std::to_string(std::get<0>(info.param)) + "xL" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Random float32 data, so the summation order shows in the bits: a repeat gives the same bits on
// every rank, and the answer is the sum to rounding.
std::vector<std::vector<float>> randomInputs(int p, size_t count) {
  std::vector<std::vector<float>> inputs(p, std::vector<float>(count));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& in : inputs) {
    for (auto& v : in) v = dist(rng);
  }
  return inputs;
}

std::vector<std::vector<float>> allreduceOf(Group& group,
                                            const std::vector<std::vector<float>>& inputs,
                                            Algorithm algorithm) {
  std::vector<std::vector<float>> out(inputs);
  group.run([&](int rank, Communicator& comm) {
    Buffer b{out[rank].data(), out[rank].size(), DType::kFloat32};
    comm.allreduce(b, {ReduceOp::kSum, algorithm});
  });
  return out;
}

TEST(Hierarchical, BitIdenticalAcrossRunsAndRanks) {
  const int p = 6;  // 3 hosts × 2
  const size_t count = 100003;
  const auto inputs = randomInputs(p, count);
  CommunicatorOptions o;
  o.segment_bytes = 16 * 1024;
  Group group(p, o, fakeHosts(3, 2));
  const auto first = allreduceOf(group, inputs, Algorithm::kHierarchical);
  const auto second = allreduceOf(group, inputs, Algorithm::kHierarchical);
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(std::memcmp(first[r].data(), second[r].data(), count * 4), 0)
        << "rank " << r << " differs between runs";
    ASSERT_EQ(std::memcmp(first[0].data(), first[r].data(), count * 4), 0)
        << "rank " << r << " differs from rank 0";
  }
  for (size_t i = 0; i < count; i += 997) {
    double exact = 0;
    for (int r = 0; r < p; ++r) exact += inputs[r][i];
    ASSERT_NEAR(first[0][i], exact, 1e-5) << "index " << i;
  }
}

// Hosts need not hold consecutive ranks: ranks 0, 2, 4 on one host and 1, 3, 5 on the other.
TEST(Hierarchical, InterleavedHostsGiveTheSameAnswer) {
  const std::vector<std::string> ids = {"a", "b", "a", "b", "a", "b"};
  Group group(6, {}, ids);
  EXPECT_EQ(group.at(3).topology().hostOf(3), 1);
  EXPECT_EQ(group.at(3).topology().localIndexOf(3), 1);
  std::vector<std::string> failures(6);
  group.run([&](int rank, Communicator& comm) {
    failures[rank] = testing::checkAllreduceMatrix(comm, Algorithm::kHierarchical, {5, 1000});
  });
  for (int r = 0; r < 6; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// A fleet that lost a rank (hosts of 2 and 1) runs the flat ring: the same bits as the ring.
TEST(Hierarchical, UnevenHostsRunTheFlatRing) {
  const int p = 3;
  const auto inputs = randomInputs(p, 50001);
  Group group(p, {}, {"a", "a", "b"});
  EXPECT_FALSE(group.at(0).topology().uniform());
  const auto hierarchical = allreduceOf(group, inputs, Algorithm::kHierarchical);
  const auto ring = allreduceOf(group, inputs, Algorithm::kRing);
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(std::memcmp(hierarchical[r].data(), ring[r].data(), inputs[r].size() * 4), 0)
        << "rank " << r;
  }
}

// What the rendezvous collected: ranks with one id share memory, the others use TCP.
TEST(Hierarchical, FakeHostsMeetOverTcpAndShareMemoryWithin) {
  Group group(4, {}, fakeHosts(2, 2));
  EXPECT_STREQ(group.at(0).transportTo(1), "shm");
  EXPECT_STREQ(group.at(0).transportTo(2), "tcp");
  EXPECT_STREQ(group.at(3).transportTo(2), "shm");
  EXPECT_STREQ(group.at(3).transportTo(1), "tcp");
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(group.at(r).topology().hostOf(r), r / 2);
    EXPECT_EQ(group.at(r).topology().localIndexOf(r), r % 2);
  }
}

// kAuto resolves with the topology: hierarchical where the model favours it on 2 × 2 hosts, never
// on one host (the same model, the same four ranks).
TEST(Hierarchical, AutoPicksItOnlyWhenRanksShareSeveralHosts) {
  CommunicatorOptions options;
  options.cost_model = CostModel(50e-6, 8e-9, 0.1e-9);  // a 1 Gbit/s link, fast local defaults
  Group twoHosts(4, options, fakeHosts(2, 2));
  EXPECT_EQ(twoHosts.at(0).resolve(Algorithm::kAuto, 64 << 20), Algorithm::kHierarchical);
  EXPECT_EQ(twoHosts.at(3).resolve(Algorithm::kAuto, 4096), Algorithm::kHierarchical);
  Group oneHost(4, options);
  EXPECT_EQ(oneHost.at(0).topology().hosts(), 1);
  EXPECT_EQ(oneHost.at(0).resolve(Algorithm::kAuto, 64 << 20), Algorithm::kRing);
  // auto's pick runs like any other.
  twoHosts.run([](int, Communicator& comm) {
    std::vector<float> x(1000, 2.0f);
    Buffer buf{x.data(), x.size(), DType::kFloat32};
    comm.allreduce(buf);
    for (float f : x) ASSERT_EQ(f, 8.0f);
  });
}

// 2 hosts × 2 ranks: {0, 1} and {2, 3}. Rank 3 never joins the all-reduce. Rank 2 waits on it
// inside its host (the reduce-scatter), rank 1 across hosts (rank 3 is its cross-ring partner,
// local index 1); rank 0 waits on rank 2 across hosts, which fails in turn.
struct Abandoned {
  MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms{4};
  std::vector<std::shared_ptr<Work>> works{3};
  std::vector<std::vector<float>> data{3, std::vector<float>(1 << 16, 1.0f)};

  explicit Abandoned(std::chrono::milliseconds timeout) {
    const auto ids = fakeHosts(2, 2);
    spawn(4, [&](int r) {
      CommunicatorOptions o = testing::withTimeout(10s);
      o.host_id = ids[r];
      comms[r] = std::make_unique<Communicator>(r, 4, store, o);
    });
    for (int r = 0; r < 3; ++r) {
      Buffer b{data[r].data(), data[r].size(), DType::kFloat32};
      works[r] = comms[r]->allreduceAsync(b, {ReduceOp::kSum, Algorithm::kHierarchical, timeout});
    }
  }
};

void expectNamed(const CommError& e, ErrorKind kind, int peer, const std::string& who) {
  EXPECT_EQ(e.kind(), kind) << who << ": " << e.what();
  EXPECT_EQ(e.op(), "allreduce") << who;
  EXPECT_EQ(e.seq(), 1u) << who;
  EXPECT_EQ(e.peer(), peer) << who << ": " << e.what();
}

TEST(Hierarchical, DeadPeerInsideOrAcrossHostsIsPeerClosed) {
  Abandoned group(10s);
  const auto start = Clock::now();
  group.comms[3].reset();  // closes its connections: EOF to everyone
  expectNamed(expectCommError([&] { group.works[2]->wait(); }), ErrorKind::kPeerClosed, 3,
              "rank 2 (same host)");
  expectNamed(expectCommError([&] { group.works[1]->wait(); }), ErrorKind::kPeerClosed, 3,
              "rank 1 (across hosts)");
  const CommError e0 = expectCommError([&] { group.works[0]->wait(); });
  EXPECT_EQ(e0.kind(), ErrorKind::kPeerClosed) << e0.what();
  EXPECT_EQ(e0.seq(), 1u);
  EXPECT_LT(Clock::now() - start, 2s);  // by the sockets, not the 10 s timeout
}

TEST(Hierarchical, StalledPeerInsideOrAcrossHostsTimesOutNamingIt) {
  Abandoned group(300ms);  // rank 3 is alive but never calls
  const auto start = Clock::now();
  const CommError e2 = expectCommError([&] { group.works[2]->wait(); });
  expectNamed(e2, ErrorKind::kTimeout, 3, "rank 2 (same host)");
  EXPECT_NE(std::string(e2.what()).find("300 ms"), std::string::npos) << e2.what();
  expectNamed(expectCommError([&] { group.works[1]->wait(); }), ErrorKind::kTimeout, 3,
              "rank 1 (across hosts)");
  const CommError e0 = expectCommError([&] { group.works[0]->wait(); });
  // Rank 0 waits on rank 2: once rank 2 has given up on rank 3 and recorded so, rank 0 names
  // rank 3 as well; if its own deadline comes first, it names rank 2, the peer it waited on.
  EXPECT_TRUE(e0.kind() == ErrorKind::kTimeout || e0.kind() == ErrorKind::kPeerClosed) << e0.what();
  EXPECT_TRUE(e0.peer() == 3 || e0.peer() == 2) << e0.what();
  EXPECT_LT(Clock::now() - start, 1500ms);
}

}  // namespace
}  // namespace cumulus::comm
