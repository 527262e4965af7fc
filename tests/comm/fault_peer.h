#pragma once
// Test helpers for faults of the data plane: options with a timeout, a CommError catcher, and a
// hand-driven peer rank ("raw peer") that speaks the wire protocol from a bare socket, so a test
// can make it lie, stall or leave. Faults is the fixture of the fault contract that every
// transport honours; its TEST_Ps live beside the code they test (rendezvous_test.cc,
// tcp/transfer_test.cc) and are instantiated once, in rendezvous_test.cc.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "comm/error.h"
#include "comm/net/frame.h"
#include "comm/net/handshake.h"
#include "comm/rendezvous.h"
#include "comm/shm/channel.h"
#include "group.h"

namespace cumulus::comm::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline CommunicatorOptions withTimeout(std::chrono::milliseconds timeout,
                                       std::string token = "t0k3n", uint64_t generation = 7) {
  CommunicatorOptions o;
  o.timeout = timeout;
  o.job_token = std::move(token);
  o.generation = generation;
  return o;
}

// Runs fn and returns the CommError it must throw.
template <typename Fn>
CommError expectCommError(Fn&& fn) {
  try {
    fn();
  } catch (const CommError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a CommError";
  return CommError(ErrorKind::kInvalid, "none", 0, -1, "");
}

// A ring all-reduce on `b` that rank 1 feeds a bad frame: it must fail within 1 s as a bad frame
// of the first all-reduce, from rank 1, with `message` in its text.
inline void expectBadFrameFromRank1(Communicator& comm, Buffer& b, const std::string& name,
                                    const std::string& message) {
  const auto start = Clock::now();
  CommError e = expectCommError([&] { comm.allreduce(b, {ReduceOp::kSum, Algorithm::kRing}); });
  EXPECT_LT(Clock::now() - start, 1s) << name;
  EXPECT_EQ(e.kind(), ErrorKind::kBadFrame) << name << ": " << e.what();
  EXPECT_EQ(e.op(), "allreduce");
  EXPECT_EQ(e.seq(), 1u);
  EXPECT_EQ(e.peer(), 1);
  EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
}

// Connects to rank 0 over `transport` the way a connector would: its TCP address, its AF_UNIX
// name, or its shared-memory listener's name.
inline net::Socket connectToRank0(Store& store, uint64_t generation, Transport transport) {
  auto connect = [&]() -> Result<net::Socket> {
    if (transport == Transport::kTcp) {
      return net::Socket::connect(store.get(addressKey(generation, 0), 5000ms), Clock::now() + 5s);
    }
    const std::string key =
        transport == Transport::kShm ? shmKey(generation, 0) : localKey(generation, 0);
    const std::string local = store.get(key, 5000ms);
    return net::Socket::connectUnix(local.substr(local.find('\n') + 1));
  };
  Result<net::Socket> connected = connect();
  EXPECT_TRUE(connected.ok()) << connected.status().detail();
  net::Socket socket = connected.ok() ? std::move(connected.value()) : net::Socket();
  EXPECT_EQ(socket.isUnix(), transport != Transport::kTcp);
  return socket;
}

// A hand-driven rank: publishes its host id and address as a rank does, connects to rank 0 over
// the transport under test, completes the handshake and, over shared memory, sets up the
// channel; returns the socket and the channel.
struct RawPeer {
  net::Socket socket;
  std::unique_ptr<shm::Channel> channel;
};
inline RawPeer rawPeer(Store& store, int rank, int world, uint64_t generation,
                       const std::string& token, Transport transport) {
  net::Socket listener = net::Socket::listen("127.0.0.1");
  store.set(hostKey(generation, rank), localHostId());
  store.set(addressKey(generation, rank), listener.localAddress());
  RawPeer peer;
  peer.socket = connectToRank0(store, generation, transport);
  net::connectorHandshake(peer.socket, {generation, rank, world, token}, 0, Clock::now() + 5s);
  if (transport == Transport::kShm) {
    peer.channel = shm::Channel::offer(peer.socket, 0, Clock::now() + 5s, true);
  }
  return peer;
}

// Every fault test runs on every transport: the contract does not depend on what carries bytes.
class Faults : public ::testing::TestWithParam<Transport> {
 protected:
  CommunicatorOptions withTimeout(std::chrono::milliseconds timeout, std::string token = "t0k3n",
                                  uint64_t generation = 7) const {
    CommunicatorOptions o = testing::withTimeout(timeout, std::move(token), generation);
    o.transport = GetParam();
    return o;
  }
  RawPeer rawPeer(Store& store, int rank, int world, uint64_t generation,
                  const std::string& token) const {
    return testing::rawPeer(store, rank, world, generation, token, GetParam());
  }
};

}  // namespace cumulus::comm::testing
