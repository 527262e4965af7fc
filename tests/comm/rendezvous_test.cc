// Rendezvous (comm/rendezvous.h): the key names, the mesh it builds, and how it fails: a peer
// that never arrives, a wrong job token, a stale generation, on every transport.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "comm/error.h"
#include "comm/rendezvous.h"
#include "comm/shm/channel.h"
#include "comm/tcp/frame.h"
#include "comm/tcp/handshake.h"
#include "fault_peer.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Clock;
using testing::connectToRank0;
using testing::expectBadFrameFromRank1;
using testing::expectCommError;
using testing::Faults;
using testing::RawPeer;
using testing::spawn;
using testing::withTimeout;

TEST_P(Faults, PeerThatNeverArrivesIsNamed) {
  MemoryStore store;
  const auto start = Clock::now();
  spawn(2, [&](int rank) {  // ranks 0 and 1 of 3; rank 2 never starts
    CommError e = expectCommError([&] { Communicator(rank, 3, store, withTimeout(300ms)); });
    EXPECT_EQ(e.kind(), ErrorKind::kRendezvous) << e.what();
    EXPECT_EQ(e.op(), "rendezvous");
    EXPECT_EQ(e.peer(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank(s) 2 of 3"), std::string::npos) << e.what();
  });
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST_P(Faults, WrongJobTokenIsUnauthorizedOnBothEnds) {
  MemoryStore store;
  spawn(2, [&](int rank) {
    auto options = withTimeout(5000ms, rank == 0 ? "right" : "wrong");
    CommError e = expectCommError([&] { Communicator(rank, 2, store, options); });
    EXPECT_EQ(e.kind(), ErrorKind::kUnauthorized) << e.what();
    EXPECT_EQ(e.peer(), 1 - rank) << e.what();
    EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
  });
}

// A raw connector: publishes an address for `rank`, connects to rank 0 and shakes hands.
TEST_P(Faults, StaleGenerationIsRejectedAsBadFrame) {
  MemoryStore store;
  store.set(addressKey(7, 1), "127.0.0.1:9");  // rank 0 proceeds to accept its rank 1
  std::thread rank0([&] {
    // Generation 7 waits for its rank 1; the stale one is turned away, then time runs out.
    CommError e = expectCommError([&] { Communicator(0, 2, store, withTimeout(500ms)); });
    EXPECT_EQ(e.kind(), ErrorKind::kRendezvous) << e.what();
    EXPECT_NE(std::string(e.what()).find("generation 6"), std::string::npos) << e.what();
  });
  tcp::Socket socket = connectToRank0(store, 7, GetParam());
  ASSERT_TRUE(socket.valid());
  CommError e = expectCommError([&] {
    tcp::connectorHandshake(socket, {6, 1, 2, "t0k3n"}, 0, Clock::now() + 5s);
  });
  EXPECT_EQ(e.kind(), ErrorKind::kBadFrame) << e.what();
  EXPECT_EQ(e.peer(), 0);
  EXPECT_NE(std::string(e.what()).find("stale generation"), std::string::npos) << e.what();
  rank0.join();
}

INSTANTIATE_TEST_SUITE_P(Transport, Faults,
                         ::testing::Values(Transport::kTcp, Transport::kUnix, Transport::kShm),
                         [](const auto& info) { return std::string(transportName(info.param)); });

}  // namespace
}  // namespace cumulus::comm
