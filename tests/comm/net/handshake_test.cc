// The data-plane handshake (comm/net/handshake.h): a peer with the token is admitted under its
// rank; a stranger, a stale generation, silence and a wrong token are turned away with the exact
// reason, and only the wrong token (a misconfigured member of this job) throws on the acceptor.
#include "comm/net/handshake.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "comm/error.h"
#include "tests/comm/socket_pair.h"

namespace cumulus::comm::net {
namespace {

using namespace std::chrono_literals;
using comm::testing::socketPair;

Deadline soon() { return Clock::now() + 5s; }

TEST(Handshake, APeerWithTheTokenIsAdmittedUnderItsRank) {
  auto wire = socketPair();
  Socket& acceptorEnd = wire.first;
  Socket& connectorEnd = wire.second;
  std::thread connector([&] { connectorHandshake(connectorEnd, {5, 2, 3, "t0k3n"}, 0, soon()); });
  const Result<HandshakePeer> peer = acceptorHandshake(acceptorEnd, {5, 0, 3, "t0k3n"}, soon());
  connector.join();
  ASSERT_TRUE(peer.ok()) << peer.status().detail();
  EXPECT_EQ(peer.value().rank, 2);
  EXPECT_EQ(peer.value().lane, kCollectiveLane);
}

TEST(Handshake, TheAcceptorLearnsTheLaneTheConnectorOpened) {
  auto wire = socketPair();
  HandshakeConfig self{5, 1, 3, "t0k3n"};
  self.lane = kPointToPointLane;
  std::thread connector([&] { connectorHandshake(wire.second, self, 0, soon()); });
  const Result<HandshakePeer> peer = acceptorHandshake(wire.first, {5, 0, 3, "t0k3n"}, soon());
  connector.join();
  ASSERT_TRUE(peer.ok()) << peer.status().detail();
  EXPECT_EQ(peer.value().rank, 1);
  EXPECT_EQ(peer.value().lane, kPointToPointLane);
}

TEST(Handshake, AStrangerIsRejectedSayingWhy) {
  auto wire = socketPair();
  Socket& acceptorEnd = wire.first;
  Socket& strangerEnd = wire.second;
  const uint8_t hello[40] = {'G', 'E', 'T', ' ', '/'};
  ASSERT_TRUE(strangerEnd.writeFull(hello, sizeof hello, soon()).ok());
  const Result<HandshakePeer> peer = acceptorHandshake(acceptorEnd, {5, 0, 3, "t0k3n"}, soon());
  ASSERT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().kind(), ErrorKind::kBadFrame);
  EXPECT_EQ(peer.status().detail(), "a connection sent a non-Cumulus hello");
}

TEST(Handshake, ASilentConnectionIsRejectedAtTheDeadline) {
  auto wire = socketPair();
  Socket& acceptorEnd = wire.first;  // wire.second, held open, says nothing
  const Result<HandshakePeer> peer =
      acceptorHandshake(acceptorEnd, {5, 0, 3, "t0k3n"}, Clock::now() + 50ms);
  ASSERT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().detail(),
            "a connection sent no complete hello: received 0 of 40 bytes before the deadline");
}

TEST(Handshake, AStaleGenerationIsTurnedAwayOnBothEnds) {
  auto wire = socketPair();
  Socket& acceptorEnd = wire.first;
  Socket& connectorEnd = wire.second;
  std::thread connector([&] {
    try {
      connectorHandshake(connectorEnd, {4, 1, 3, "t0k3n"}, 0, soon());
      ADD_FAILURE() << "generation 4 joined generation 5";
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadFrame);
      EXPECT_STREQ(e.what(),
                   "rendezvous seq 0 with rank 0: bad frame: stale generation: we are generation "
                   "4, the peer is generation 5 (this worker belongs to an older or newer group; "
                   "restart it)");
    }
  });
  const Result<HandshakePeer> peer = acceptorHandshake(acceptorEnd, {5, 0, 3, "t0k3n"}, soon());
  connector.join();
  ASSERT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().detail(), "rank 1 of generation 4 tried to join generation 5");
}

TEST(Handshake, AWrongTokenIsUnauthorizedOnBothEnds) {
  auto wire = socketPair();
  Socket& acceptorEnd = wire.first;
  Socket& connectorEnd = wire.second;
  std::thread connector([&] {
    try {
      connectorHandshake(connectorEnd, {5, 1, 3, "wrong"}, 0, soon());
      ADD_FAILURE() << "the connector accepted an acceptor with another token";
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnauthorized);
      EXPECT_STREQ(e.what(),
                   "rendezvous seq 0 with rank 0: unauthorized: the peer does not hold this job's "
                   "token (check CUMULUS_JOB_TOKEN)");
    }
  });
  try {
    static_cast<void>(acceptorHandshake(acceptorEnd, {5, 0, 3, "right"}, soon()));
    ADD_FAILURE() << "the acceptor admitted a peer with another token";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnauthorized);
    EXPECT_STREQ(e.what(),
                 "rendezvous seq 0 with rank 1: unauthorized: rank 1 does not hold this job's "
                 "token (check CUMULUS_JOB_TOKEN)");
  }
  connector.join();
}

}  // namespace
}  // namespace cumulus::comm::net
