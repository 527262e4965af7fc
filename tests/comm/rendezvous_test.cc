// Rendezvous (comm/rendezvous.h): the key names, the mesh it builds, and how it fails: a peer
// that never arrives, a wrong job token, a stale generation, on every transport.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "comm/error.h"
#include "comm/net/frame.h"
#include "comm/net/handshake.h"
#include "comm/rendezvous.h"
#include "comm/shm/channel.h"
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
  net::Socket socket = connectToRank0(store, 7, GetParam());
  ASSERT_TRUE(socket.valid());
  CommError e = expectCommError([&] {
    net::connectorHandshake(socket, {6, 1, 2, "t0k3n"}, 0, Clock::now() + 5s);
  });
  EXPECT_EQ(e.kind(), ErrorKind::kBadFrame) << e.what();
  EXPECT_EQ(e.peer(), 0);
  EXPECT_NE(std::string(e.what()).find("stale generation"), std::string::npos) << e.what();
  rank0.join();
}

TEST(Rendezvous, AWorldOfOneNeedsNoPeersAndPublishesNothing) {
  MemoryStore store;
  RendezvousConfig config;
  config.deadline = Clock::now() + 5s;
  const std::vector<std::unique_ptr<net::Pair>> pairs = connectMesh(store, config).pairs;
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0], nullptr);
  EXPECT_FALSE(store.tryGet(addressKey(0, 0)).has_value());
}

// Every rank ends with one authenticated pair per peer, carried by the transport asked for (all
// ranks share this host, so kAuto takes shared memory).
TEST(Rendezvous, TheMeshHasOnePairPerPeerOverTheTransportAskedFor) {
  const std::pair<Transport, const char*> cases[] = {{Transport::kTcp, "tcp"},
                                                     {Transport::kUnix, "unix"},
                                                     {Transport::kShm, "shm"},
                                                     {Transport::kAuto, "shm"}};
  for (const auto& c : cases) {
    const Transport transport = c.first;  // a plain variable: a lambda cannot capture a binding
    const char* const carrier = c.second;
    const int world = 3;
    MemoryStore store;
    std::vector<std::vector<std::unique_ptr<net::Pair>>> meshes(world);
    spawn(world, [&](int rank) {
      RendezvousConfig config;
      config.rank = rank;
      config.world = world;
      config.generation = 4;
      config.token = "t0k3n";
      config.transport = transport;
      config.deadline = Clock::now() + 5s;
      meshes[rank] = connectMesh(store, config).pairs;
    });
    for (int rank = 0; rank < world; ++rank) {
      ASSERT_EQ(meshes[rank].size(), size_t(world));
      for (int peer = 0; peer < world; ++peer) {
        const auto& pair = meshes[rank][peer];
        if (peer == rank) {
          EXPECT_EQ(pair, nullptr);
          continue;
        }
        ASSERT_NE(pair, nullptr) << "rank " << rank << " peer " << peer;
        EXPECT_EQ(pair->peer(), peer);
        EXPECT_STREQ(pair->transport(), carrier) << transportName(transport);
      }
    }
  }
}

// With point_to_point every rank also has a lane to every peer, a second connection apart from the
// pair: over AF_UNIX between ranks of one host, over TCP when the transport is TCP.
TEST(Rendezvous, PointToPointLanesJoinEveryPairWhenAsked) {
  for (Transport transport : {Transport::kTcp, Transport::kAuto}) {
    const int world = 3;
    MemoryStore store;
    std::vector<Mesh> meshes(world);
    spawn(world, [&](int rank) {
      RendezvousConfig config;
      config.rank = rank;
      config.world = world;
      config.token = "t0k3n";
      config.transport = transport;
      config.point_to_point = true;
      config.deadline = Clock::now() + 5s;
      meshes[rank] = connectMesh(store, config);
    });
    for (int rank = 0; rank < world; ++rank) {
      ASSERT_EQ(meshes[rank].lanes.size(), size_t(world));
      for (int peer = 0; peer < world; ++peer) {
        const net::Socket& lane = meshes[rank].lanes[peer];
        EXPECT_EQ(lane.valid(), peer != rank) << rank << " " << peer;
        if (peer == rank) continue;
        EXPECT_EQ(lane.isUnix(), transport != Transport::kTcp) << rank << " " << peer;
        EXPECT_NE(lane.fd(), meshes[rank].pairs[peer]->fd());
      }
    }
  }
}

// A rank that waits for lanes its peer never opens says so when its deadline passes.
TEST(Rendezvous, RanksThatDisagreeOnLanesFailNamingThePeer) {
  MemoryStore store;
  std::string error;
  spawn(2, [&](int rank) {
    RendezvousConfig config;
    config.rank = rank;
    config.world = 2;
    config.point_to_point = rank == 0;
    config.deadline = Clock::now() + (rank == 0 ? 300ms : 5s);
    if (rank == 1) {
      connectMesh(store, config);
      return;
    }
    CommError e = expectCommError([&] { connectMesh(store, config); });
    error = e.what();
  });
  EXPECT_EQ(error,
            "rendezvous seq 0 with rank 1: rendezvous: rank(s) 1 never opened a point-to-point "
            "lane to rank 0 (no connection arrived before the deadline); do all ranks agree on "
            "point_to_point?");
}

// The one instantiation of the Faults suite (fault_peer.h), whose TEST_Ps are here and in
// tcp/transfer_test.cc.
INSTANTIATE_TEST_SUITE_P(Transport, Faults,
                         ::testing::Values(Transport::kTcp, Transport::kUnix, Transport::kShm),
                         [](const auto& info) { return std::string(transportName(info.param)); });

}  // namespace
}  // namespace cumulus::comm
