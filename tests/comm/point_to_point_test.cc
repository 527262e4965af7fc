// Point-to-point (comm/point_to_point.h): messages arrive whole, in order per sender, matched by
// tag and source; ranks that all send before they receive do not deadlock; a receive from any
// source says who sent; a size mismatch, a receive that nothing matches, a peer that hangs up, a
// peer that stops reading and a peer that sends garbage each fail the right Work with the exact
// reason; a broken group fails what is pending.
#include "comm/point_to_point.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/error.h"
#include "comm/net/frame.h"
#include "fault_peer.h"
#include "group.h"
#include "socket_pair.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Group;

// Byte i of the message `id`: every message's bytes differ from every other's.
uint8_t patternByte(int id, size_t i) { return static_cast<uint8_t>(i * 131 + id * 17 + 5); }

std::vector<uint8_t> pattern(int id, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = patternByte(id, i);
  return out;
}

// The first index where `got` differs from message `id`, or -1.
long firstMismatch(const std::vector<uint8_t>& got, int id) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != patternByte(id, i)) return static_cast<long>(i);
  }
  return -1;
}

CommunicatorOptions withLanes(Transport transport) {
  CommunicatorOptions options;
  options.point_to_point = true;
  options.transport = transport;
  return options;
}

class PointToPointOver : public ::testing::TestWithParam<Transport> {};

// Rank 0 sends four messages under tags 1, 2, 1, 3 (one empty, one of many socket buffers); rank
// 1 receives tag 2 first, then the two of tag 1, then tag 3. Each receive gets its message whole,
// and the two of tag 1 arrive in the order they were sent.
TEST_P(PointToPointOver, MessagesMatchByTagAndKeepTheirSendersOrder) {
  Group group(2, withLanes(GetParam()));
  const std::vector<size_t> sizes = {1000, 0, (size_t(4) << 20) + 3, 17};
  const std::vector<uint32_t> tags = {1, 2, 1, 3};
  group.run([&](int rank, Communicator& comm) {
    if (rank == 0) {
      std::vector<std::vector<uint8_t>> messages;
      std::vector<std::shared_ptr<Work>> works;
      for (size_t m = 0; m < sizes.size(); ++m) messages.push_back(pattern(int(m), sizes[m]));
      for (size_t m = 0; m < sizes.size(); ++m) {
        works.push_back(comm.send(messages[m].data(), sizes[m], 1, tags[m]));
      }
      for (auto& w : works) w->wait();
      return;
    }
    for (size_t m : {size_t(1), size_t(0), size_t(2), size_t(3)}) {
      std::vector<uint8_t> got(sizes[m]);
      auto work = comm.recv(got.data(), got.size(), 0, tags[m]);
      work->wait();
      EXPECT_EQ(work->source(), 0);
      EXPECT_EQ(firstMismatch(got, int(m)), -1) << "message " << m;
    }
  });
  EXPECT_EQ(group.at(0).bytesSent(),
            4 * net::kFrameHeaderBytes + sizes[0] + sizes[1] + sizes[2] + sizes[3]);
}

// Every rank of four sends 3 MiB to each other rank before it posts a single receive: the
// receivers read eagerly, so nobody waits on anybody, and every message arrives whole.
TEST_P(PointToPointOver, RanksThatAllSendFirstDoNotDeadlock) {
  const int world = 4;
  const size_t bytes = (size_t(3) << 20) + 1;
  Group group(world, withLanes(GetParam()));
  group.run([&](int rank, Communicator& comm) {
    std::vector<std::vector<uint8_t>> out(world), in(world);
    std::vector<std::shared_ptr<Work>> sends;
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      out[peer] = pattern(rank * world + peer, bytes);
      sends.push_back(comm.send(out[peer].data(), bytes, peer, 9));
    }
    for (auto& s : sends) s->wait();
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      in[peer].resize(bytes);
      comm.recv(in[peer].data(), bytes, peer, 9)->wait();
      EXPECT_EQ(firstMismatch(in[peer], peer * world + rank), -1) << rank << " from " << peer;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPointOver,
                         ::testing::Values(Transport::kTcp, Transport::kUnix),
                         [](const auto& info) { return std::string(transportName(info.param)); });

// Rank 0 takes two messages of tag 7 from any source; ranks 1 and 2 send one each, their rank in
// it. Each receive names the rank whose bytes it holds.
TEST(PointToPoint, AReceiveFromAnySourceSaysWhoSent) {
  Group group(3, withLanes(Transport::kAuto));
  group.run([&](int rank, Communicator& comm) {
    int32_t value = rank;
    if (rank != 0) {
      comm.send(&value, sizeof value, 0, 7)->wait();
      return;
    }
    std::vector<int> sources;
    for (int i = 0; i < 2; ++i) {
      int32_t got = -1;
      auto work = comm.recv(&got, sizeof got, PointToPoint::kAnySource, 7);
      work->wait();
      EXPECT_EQ(got, work->source());
      sources.push_back(work->source());
    }
    std::sort(sources.begin(), sources.end());
    EXPECT_EQ(sources, (std::vector<int>{1, 2}));
  });
}

// A receive of 8 bytes for a message of 16 fails naming both sizes, and the message is dropped:
// the next message of the same tag goes to the next receive.
TEST(PointToPoint, ASizeMismatchFailsTheReceiveAndDropsTheMessage) {
  Group group(2, withLanes(Transport::kAuto));
  group.run([&](int rank, Communicator& comm) {
    if (rank == 0) {
      std::vector<uint8_t> big = pattern(1, 16), small = pattern(2, 8);
      comm.send(big.data(), big.size(), 1, 3)->wait();
      comm.send(small.data(), small.size(), 1, 3)->wait();
      return;
    }
    std::vector<uint8_t> got(8);
    CommError e = testing::expectCommError([&] { comm.recv(got.data(), 8, 0, 3)->wait(); });
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_EQ(e.peer(), 0);
    EXPECT_STREQ(e.what(),
                 "recv seq 1 with rank 0: invalid: rank 0 sent 16 bytes with tag 3 to a receive of "
                 "8 bytes on rank 1 (do both pass the same count and dtype?); the message is "
                 "dropped");
    comm.recv(got.data(), 8, 0, 3)->wait();
    EXPECT_EQ(firstMismatch(got, 2), -1);
  });
}

// A receive that nothing matches fails at its deadline and takes nothing afterwards: the message
// sent later goes to the receive posted later.
TEST(PointToPoint, AReceiveNothingMatchesTimesOutAndTakesNothingLater) {
  Group group(2, withLanes(Transport::kAuto));
  group.run([&](int rank, Communicator& comm) {
    int32_t value = 0;
    if (rank == 1) {
      CommError e = testing::expectCommError(
          [&] { comm.recv(&value, sizeof value, 0, 5, OpOptions{200ms})->wait(); });
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
      EXPECT_STREQ(e.what(),
                   "recv seq 1 with rank 0: timeout: nothing from rank 0 with tag 5 arrived "
                   "within 200 ms");
      comm.barrier();
      comm.recv(&value, sizeof value, 0, 5)->wait();
      EXPECT_EQ(value, 42);
      return;
    }
    comm.barrier();  // after rank 1's receive timed out
    value = 42;
    comm.send(&value, sizeof value, 1, 5)->wait();
  });
}

TEST(PointToPoint, ItselfOrARankOutsideTheGroupIsRefused) {
  Group group(2, withLanes(Transport::kAuto));
  int32_t value = 0;
  CommError self = testing::expectCommError([&] { group.at(0).send(&value, 4, 0, 0); });
  EXPECT_EQ(self.kind(), ErrorKind::kInvalid);
  EXPECT_STREQ(self.what(), "send seq 0 with rank 0: invalid: send: rank 0 is this rank itself");
  CommError outside = testing::expectCommError([&] { group.at(1).recv(&value, 4, 2, 0); });
  EXPECT_STREQ(outside.what(),
               "recv seq 0 with rank 2: invalid: recv: rank 2 is not a rank of "
               "a world of 2");
}

TEST(PointToPoint, ACommunicatorWithoutLanesSaysSo) {
  Group group(2);
  int32_t value = 0;
  CommError e = testing::expectCommError([&] { group.at(0).send(&value, 4, 1, 0); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
  EXPECT_STREQ(e.what(),
               "send seq 0: invalid: this communicator has no point-to-point lanes "
               "(CommunicatorOptions::point_to_point)");
}

// Rank 0 of a world of two whose lane to rank 1 is one end of a socket pair: the test is rank 1
// and writes (or does not read) whatever it likes on the other end.
struct HandDriven {
  HandDriven() {
    auto wire = testing::socketPair();
    peer = std::move(wire.second);
    std::vector<net::Socket> lanes(2);
    lanes[1] = std::move(wire.first);
    p2p = std::make_unique<PointToPoint>(0, 2, 6, std::move(lanes), nullptr);
  }
  // One write of header and payload together: rank 0 may shut the lane as soon as it has read a
  // bad header, and a second write would then race its close (EPIPE on a busy machine).
  void write(const net::FrameHeader& h, size_t payload) {
    std::vector<uint8_t> frame(net::kFrameHeaderBytes + payload, 0xab);
    net::encodeFrameHeader(h, frame.data());
    ASSERT_TRUE(peer.writeFull(frame.data(), frame.size(), net::Clock::now() + 5s).ok());
  }
  net::Socket peer;
  std::unique_ptr<PointToPoint> p2p;
};

net::FrameHeader message(uint64_t sequence, uint32_t tag, uint64_t length) {
  net::FrameHeader h;
  h.magic = kPointToPointMagic;
  h.tag = tag;
  h.generation = 6;
  h.sequence = sequence;
  h.length = length;
  return h;
}

// A message that arrives before its receive is buffered; one from another generation or out of
// sequence shuts the lane (kBadFrame naming what came), and fails what was pending on it.
TEST(PointToPoint, AFrameOtherThanTheNextMessageShutsTheLane) {
  HandDriven rank0;
  rank0.write(message(1, 4, 3), 3);
  uint8_t got[3] = {0, 0, 0};
  auto first = rank0.p2p->recv(1, 4, got, 3, 5s);
  first->wait();
  EXPECT_EQ(got[2], 0xab);
  int32_t value = 0;
  auto pending = rank0.p2p->recv(1, 8, &value, 4, 30s);
  net::FrameHeader stale = message(2, 8, 4);
  stale.generation = 5;
  rank0.write(stale, 4);
  CommError e = testing::expectCommError([&] { pending->wait(); });
  EXPECT_EQ(e.kind(), ErrorKind::kBadFrame);
  EXPECT_STREQ(e.what(),
               "recv seq 2 with rank 1: bad frame: rank 1 sent something other than its next "
               "point-to-point message (expected message 2 of generation 6, got magic 1347177795, "
               "generation 5, message 2)");
  CommError later =
      testing::expectCommError([&] { rank0.p2p->recv(1, 8, &value, 4, 30s)->wait(); });
  EXPECT_EQ(later.kind(), ErrorKind::kBadFrame);
}

// A header announcing more than memory holds shuts the lane (kBadFrame) instead of crashing.
TEST(PointToPoint, AMessageNoProcessCouldHoldShutsTheLane) {
  HandDriven rank0;
  int32_t value = 0;
  auto pending = rank0.p2p->recv(1, 2, &value, 4, 30s);
  uint8_t header[net::kFrameHeaderBytes];
  net::encodeFrameHeader(message(1, 9, uint64_t{1} << 62), header);
  ASSERT_TRUE(rank0.peer.writeFull(header, sizeof header, net::Clock::now() + 5s).ok());
  CommError e = testing::expectCommError([&] { pending->wait(); });
  EXPECT_EQ(e.kind(), ErrorKind::kBadFrame);
  EXPECT_STREQ(e.what(),
               "recv seq 1 with rank 1: bad frame: rank 1 announced a message of "
               "4611686018427387904 bytes, more than this process can hold");
}

// The peer hangs up: a receive from it fails at once (kPeerClosed naming it), long before its
// deadline; a message that arrived before the hang-up is still delivered.
TEST(PointToPoint, APeerThatHangsUpFailsItsReceivesAtOnce) {
  HandDriven rank0;
  int32_t value = 0;
  auto pending = rank0.p2p->recv(1, 1, &value, 4, 600s);
  rank0.write(message(1, 2, 4), 4);
  rank0.peer.close();
  CommError e = testing::expectCommError([&] { pending->wait(); });
  EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed);
  EXPECT_EQ(e.peer(), 1);
  EXPECT_STREQ(e.what(),
               "recv seq 1 with rank 1: peer closed: the point-to-point lane to rank 1 closed "
               "(the peer hung up; did rank 1 exit?)");
  rank0.p2p->recv(1, 2, &value, 4, 5s)->wait();
  EXPECT_EQ(value, int32_t(0xabababab));
}

// A peer that never reads: a send of more than the socket holds fails at its deadline, and the
// lane, on which half a message now lies, is shut with it.
TEST(PointToPoint, ASendThePeerNeverTakesTimesOutAndShutsTheLane) {
  HandDriven rank0;
  std::vector<uint8_t> big(size_t(64) << 20, 1);
  auto send = rank0.p2p->send(1, 0, big.data(), big.size(), 300ms);
  CommError e = testing::expectCommError([&] { send->wait(); });
  EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
  EXPECT_STREQ(e.what(),
               "send seq 1 with rank 1: timeout: a send of 67108864 bytes with tag 0 to rank 1 "
               "was not taken within 300 ms (is rank 1 still running?); the lane to it is shut");
  int32_t value = 1;
  CommError after = testing::expectCommError([&] { rank0.p2p->send(1, 0, &value, 4, 5s)->wait(); });
  EXPECT_EQ(after.kind(), ErrorKind::kTimeout);
}

// A collective that fails breaks the communicator, and with it the receives pending on its lanes.
TEST(PointToPoint, ABrokenGroupFailsWhatIsPending) {
  Group group(2, withLanes(Transport::kAuto));
  int32_t value = 0;
  auto pending = group.at(0).recv(&value, 4, 1, 0, OpOptions{600s});
  // Rank 0 alone enters an all-reduce: it times out, and the group is broken.
  Buffer b{&value, 1, DType::kInt32};
  testing::expectCommError([&] {
    group.at(0).allreduce(b, {ReduceOp::kSum, Algorithm::kRing, 100ms});
  });
  CommError e = testing::expectCommError([&] { pending->wait(); });
  EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
  EXPECT_NE(std::string(e.what()).find("the group is broken by an earlier failure"),
            std::string::npos)
      << e.what();
  CommError later = testing::expectCommError([&] { group.at(0).send(&value, 4, 1, 0)->wait(); });
  EXPECT_NE(std::string(later.what()).find("allreduce seq 1"), std::string::npos) << later.what();
}

}  // namespace
}  // namespace cumulus::comm
