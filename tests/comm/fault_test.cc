// Faults end in the typed error, naming op, seq and peer, well within the timeout: a peer that
// never arrives, a wrong job token, a stale generation, a corrupt frame from a raw socket, a
// peer that closes its connections, a peer that stalls.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "comm/error.h"
#include "comm/rendezvous.h"
#include "comm/shm/channel.h"
#include "comm/tcp/frame.h"
#include "comm/tcp/handshake.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::spawn;

CommunicatorOptions withTimeout(std::chrono::milliseconds timeout, std::string token = "t0k3n",
                                uint64_t generation = 7) {
  CommunicatorOptions o;
  o.timeout = timeout;
  o.jobToken = std::move(token);
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
void expectBadFrameFromRank1(Communicator& comm, Buffer& b, const std::string& name,
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
tcp::Socket connectToRank0(Store& store, uint64_t generation, Transport transport) {
  auto connect = [&]() -> Result<tcp::Socket> {
    if (transport == Transport::kTcp) {
      return tcp::Socket::connect(store.get(addressKey(generation, 0), 5000ms), Clock::now() + 5s);
    }
    const std::string key =
        transport == Transport::kShm ? shmKey(generation, 0) : localKey(generation, 0);
    const std::string local = store.get(key, 5000ms);
    return tcp::Socket::connectUnix(local.substr(local.find('\n') + 1));
  };
  Result<tcp::Socket> connected = connect();
  EXPECT_TRUE(connected.ok()) << connected.status().detail();
  tcp::Socket socket = connected.ok() ? std::move(connected.value()) : tcp::Socket();
  EXPECT_EQ(socket.isUnix(), transport != Transport::kTcp);
  return socket;
}

// A hand-driven rank: connects to rank 0 over the transport under test, completes the handshake
// and, over shared memory, sets up the channel; returns the socket and the channel.
struct RawPeer {
  tcp::Socket socket;
  std::unique_ptr<shm::Channel> channel;
};
RawPeer rawPeer(Store& store, int rank, int world, uint64_t generation, const std::string& token,
                Transport transport) {
  tcp::Socket listener = tcp::Socket::listen("127.0.0.1");
  store.set(addressKey(generation, rank), listener.localAddress());
  RawPeer peer;
  peer.socket = connectToRank0(store, generation, transport);
  tcp::connectorHandshake(peer.socket, {generation, rank, world, token}, 0, Clock::now() + 5s);
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
    CommunicatorOptions o = comm::withTimeout(timeout, std::move(token), generation);
    o.transport = GetParam();
    return o;
  }
  RawPeer rawPeer(Store& store, int rank, int world, uint64_t generation,
                  const std::string& token) const {
    return comm::rawPeer(store, rank, world, generation, token, GetParam());
  }
};

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

struct Corruption {
  const char* name;
  tcp::FrameHeader header;
  const char* message;
};

TEST_P(Faults, CorruptFramesAreBadFramesNamingOpSeqAndPeer) {
  const uint64_t gen = 7;
  const size_t count = 1000;  // ring, p = 2: rank 0 expects 500 floats as message 0
  auto frame = [&](uint32_t magic, uint64_t g, uint64_t seq, uint32_t tag, uint64_t len) {
    tcp::FrameHeader h;
    h.magic = magic, h.generation = g, h.sequence = seq, h.tag = tag, h.length = len;
    return h;
  };
  const Corruption cases[] = {
      {"magic", frame(0xdeadbeef, gen, 1, 0, 2000), "wrong magic 0xdeadbeef"},
      {"generation", frame(tcp::kFrameMagic, gen - 1, 1, 0, 2000), "stale generation 6"},
      {"sequence", frame(tcp::kFrameMagic, gen, 5, 0, 2000), "unexpected sequence 5"},
      {"tag", frame(tcp::kFrameMagic, gen, 1, 3, 2000), "unexpected tag 3"},
      {"length", frame(tcp::kFrameMagic, gen, 1, 0, 1996), "wrong length 1996"},
  };
  for (const Corruption& c : cases) {
    MemoryStore store;
    std::thread liar([&] {
      RawPeer peer = rawPeer(store, 1, 2, gen, "t0k3n");
      tcp::Socket& socket = peer.socket;
      uint8_t bytes[tcp::kFrameHeaderBytes];
      tcp::encodeFrameHeader(c.header, bytes);
      std::vector<uint8_t> payload(2000, 0x7f);
      EXPECT_TRUE(socket.writeFull(bytes, sizeof bytes, Clock::now() + 5s).ok());
      // Rank 0 may give up on the header before it reads the payload: then this write fails.
      static_cast<void>(socket.writeFull(payload.data(), payload.size(), Clock::now() + 5s));
      // Hold the connection open until rank 0 gives up, so the only fault is the frame; the read
      // ends, failed, when it does.
      uint8_t sink[4096];
      static_cast<void>(socket.readFull(sink, sizeof sink, Clock::now() + 5s));
    });
    Communicator comm(0, 2, store, withTimeout(5000ms));
    std::vector<float> v(count, 1.0f);
    Buffer b{v.data(), count, DType::kFloat32};
    expectBadFrameFromRank1(comm, b, c.name, c.message);
    // The communicator is now broken: later calls fail at once with the first error's kind.
    CommError again = expectCommError([&] { comm.barrier(); });
    EXPECT_EQ(again.kind(), ErrorKind::kBadFrame);
    EXPECT_EQ(again.op(), "barrier");
    EXPECT_EQ(again.seq(), 2u);
    liar.join();
  }
}

TEST_P(Faults, MismatchedCountsAreDetectedNotMixed) {
  MemoryStore store;
  std::vector<std::string> errors(2);
  std::vector<ErrorKind> kinds(2);
  spawn(2, [&](int r) {
    Communicator comm(r, 2, store, withTimeout(5s));
    std::vector<float> v(r == 0 ? 1000 : 1200, 1.0f);  // rank 1 is wrong
    Buffer b{v.data(), v.size(), DType::kFloat32};
    CommError e = expectCommError([&] { comm.allreduce(b, {ReduceOp::kSum, Algorithm::kRing}); });
    EXPECT_EQ(e.peer(), 1 - r);
    errors[r] = e.what();
    kinds[r] = e.kind();
  });
  // Whoever reads the other's first frame reports it; the other may see the connection drop.
  const bool seen = (kinds[0] == ErrorKind::kBadFrame &&
                     errors[0].find("wrong length 2400") != std::string::npos) ||
                    (kinds[1] == ErrorKind::kBadFrame &&
                     errors[1].find("wrong length 2000") != std::string::npos);
  EXPECT_TRUE(seen) << errors[0] << " | " << errors[1];
}

TEST_P(Faults, PeerClosingItsConnectionsIsPeerClosed) {
  MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(2);
  spawn(2,
        [&](int r) { comms[r] = std::make_unique<Communicator>(r, 2, store, withTimeout(10s)); });
  std::vector<float> v(1 << 20, 1.0f);
  Buffer b{v.data(), v.size(), DType::kFloat32};
  const auto start = Clock::now();
  auto work = comms[0]->allreduceAsync(b, {ReduceOp::kSum, Algorithm::kRing});
  // Rank 1 never joins the collective and goes away while rank 0 runs it: rank 0 cannot finish
  // without rank 1, so whenever the close lands, rank 0 is in (or about to be in) the collective.
  comms[1].reset();
  CommError e = expectCommError([&] { work->wait(); });
  // The Work reports the failure the same way to every observer.
  EXPECT_TRUE(work->isCompleted());
  ASSERT_NE(work->exception(), nullptr);
  EXPECT_THROW(std::rethrow_exception(work->exception()), CommError);
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed) << e.what();
  EXPECT_EQ(e.op(), "allreduce");
  EXPECT_EQ(e.seq(), 1u);
  EXPECT_EQ(e.peer(), 1);
}

TEST_P(Faults, StalledPeerTimesOutNamingIt) {
  MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(3);
  spawn(3,
        [&](int r) { comms[r] = std::make_unique<Communicator>(r, 3, store, withTimeout(10s)); });
  // Ranks 0 and 1 enter a tree all-reduce with a 300 ms timeout; rank 2 never does. Rank 0 is the
  // root and waits on rank 2's contribution (its child at distance 2).
  std::vector<std::vector<int32_t>> data(2, std::vector<int32_t>(100, 1));
  const auto start = Clock::now();
  spawn(2, [&](int r) {
    Buffer b{data[r].data(), 100, DType::kInt32};
    CommError e = expectCommError([&] {
      comms[r]->allreduce(b, {ReduceOp::kSum, Algorithm::kTree, 300ms});
    });
    if (r == 0) {
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
      EXPECT_EQ(e.peer(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("300 ms"), std::string::npos) << e.what();
    } else {
      // Rank 1 sent its part to rank 0 and then waits for the broadcast: it times out on rank 0,
      // or sees rank 0 close its connections on failure, whichever comes first.
      EXPECT_TRUE(e.kind() == ErrorKind::kTimeout || e.kind() == ErrorKind::kPeerClosed)
          << e.what();
      EXPECT_EQ(e.peer(), 0) << e.what();
    }
    EXPECT_EQ(e.seq(), 1u);
  });
  EXPECT_LT(Clock::now() - start, 1500ms);
}

// Shared memory only: what can go wrong with slots.

// The header arrives on the socket but the slot does not hold that frame (a peer out of step or
// lying), or the frame comes inline where a slot was due: kBadFrame naming op, seq and peer.
TEST(ShmFaults, SlotsThatDoNotHoldTheAnnouncedFrameAreBadFrames) {
  const uint64_t gen = 7;
  const size_t count = 1 << 16;  // ring, p = 2: message 0 is a 64 KiB segment, through a slot
  const uint64_t bytes = 64 * 1024;
  struct Case {
    const char* name;
    uint32_t magic;
    bool fillSlot;  // commit a slot stamped for another sequence number first
    const char* message;
  };
  const Case cases[] = {
      {"empty slot", tcp::kShmFrameMagic, false, "shared-memory slot 0 holds sequence 0"},
      {"stale slot", tcp::kShmFrameMagic, true, "shared-memory slot 0 holds sequence 9"},
      {"inline", tcp::kFrameMagic, false, "an inline frame where a shared-memory one was due"},
  };
  for (const Case& c : cases) {
    MemoryStore store;
    std::thread liar([&] {
      RawPeer peer = rawPeer(store, 1, 2, gen, "t0k3n", Transport::kShm);
      if (c.fillSlot) {
        std::memset(peer.channel->acquire(), 0x7f, bytes);
        peer.channel->commit(9, 0, bytes);
      }
      tcp::FrameHeader h;
      h.magic = c.magic, h.generation = gen, h.sequence = 1, h.tag = 0, h.length = bytes;
      uint8_t header[tcp::kFrameHeaderBytes];
      tcp::encodeFrameHeader(h, header);
      EXPECT_TRUE(peer.socket.writeFull(header, sizeof header, Clock::now() + 5s).ok());
      uint8_t sink[4096];  // held open until rank 0 gives up, as above
      static_cast<void>(peer.socket.readFull(sink, sizeof sink, Clock::now() + 5s));
    });
    CommunicatorOptions o = withTimeout(5000ms);
    o.transport = Transport::kShm;
    Communicator comm(0, 2, store, o);
    EXPECT_STREQ(comm.transportTo(1), "shm");
    std::vector<float> v(count, 1.0f);
    Buffer b{v.data(), count, DType::kFloat32};
    expectBadFrameFromRank1(comm, b, c.name, c.message);
    liar.join();
  }
}

// A same-host peer that cannot create a segment (no memfd in its sandbox, no memory) declines the
// offer under auto; the pair then carries everything inline on its AF_UNIX socket, and says so.
TEST(ShmFaults, DeclinedSegmentLeavesAPlainAfUnixPair) {
  const uint64_t gen = 7;
  MemoryStore store;
  std::thread peer([&] {
    tcp::Socket listener = tcp::Socket::listen("127.0.0.1");
    store.set(addressKey(gen, 1), listener.localAddress());
    tcp::Socket socket = connectToRank0(store, gen, Transport::kShm);
    tcp::connectorHandshake(socket, {gen, 1, 2, "t0k3n"}, 0, Clock::now() + 5s);
    shm::Channel::decline(socket, 0, Clock::now() + 5s);
    // Ring all-reduce of 2 floats, p = 2, as rank 1: send our chunk 0 (3.0), then chunk 1 as
    // the all-gather delivers it (final value 40.0), both inline.
    for (uint32_t tag : {0u, 1u}) {
      tcp::FrameHeader h;
      h.generation = gen, h.sequence = 1, h.tag = tag, h.length = 4;
      uint8_t frame[tcp::kFrameHeaderBytes + 4];
      tcp::encodeFrameHeader(h, frame);
      const float value = tag == 0 ? 3.0f : 40.0f;
      std::memcpy(frame + tcp::kFrameHeaderBytes, &value, 4);
      EXPECT_TRUE(socket.writeFull(frame, sizeof frame, Clock::now() + 5s).ok());
    }
    uint8_t sink[2 * (tcp::kFrameHeaderBytes + 4)];
    EXPECT_TRUE(socket.readFull(sink, sizeof sink, Clock::now() + 5s).ok());
  });
  Communicator comm(0, 2, store, withTimeout(5000ms));  // auto
  EXPECT_STREQ(comm.transportTo(1), "unix");
  std::vector<float> v = {1.0f, 2.0f};
  Buffer b{v.data(), 2, DType::kFloat32};
  comm.allreduce(b, {ReduceOp::kSum, Algorithm::kRing});
  EXPECT_EQ(v[0], 4.0f);   // ours 1.0 + the peer's 3.0
  EXPECT_EQ(v[1], 40.0f);  // as the peer delivered it
  peer.join();
}

// A producer whose consumer never reads fills every slot, then waits for one: that wait has the
// operation's deadline (kTimeout naming the consumer), and a consumer that goes away ends it at
// once (kPeerClosed), because the producer sleeps on the socket as well as on the slot's eventfd.
TEST(ShmFaults, ProducerWaitingForASlotTimesOutOrSeesThePeerGo) {
  for (bool peerLeaves : {false, true}) {
    MemoryStore store;
    std::vector<std::unique_ptr<Communicator>> comms(2);
    spawn(2, [&](int r) {
      CommunicatorOptions o = withTimeout(10s);
      o.transport = Transport::kShm;
      comms[r] = std::make_unique<Communicator>(r, 2, store, o);
    });
    // 8 MiB from root 0: 16 segments of 512 KiB for 4 slots; rank 1 never joins the broadcast.
    std::vector<float> v(2 << 20, 1.0f);
    Buffer b{v.data(), v.size(), DType::kFloat32};
    std::thread leaver([&] {
      if (!peerLeaves) return;
      // Leave once rank 0 sleeps for a slot (every slot full, rank 1 consuming none).
      const auto deadline = Clock::now() + 5s;
      while (comms[0]->slotWaits() == 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
      EXPECT_GT(comms[0]->slotWaits(), 0u) << "rank 0 never waited for a shared-memory slot";
      comms[1].reset();
    });
    const auto start = Clock::now();
    CommError e = expectCommError([&] { comms[0]->broadcast(b, 0, {peerLeaves ? 5s : 300ms}); });
    leaver.join();
    EXPECT_LT(Clock::now() - start, 1500ms);
    EXPECT_EQ(e.kind(), peerLeaves ? ErrorKind::kPeerClosed : ErrorKind::kTimeout) << e.what();
    EXPECT_EQ(e.op(), "broadcast");
    EXPECT_EQ(e.seq(), 1u);
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find("shared-memory slot"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Transport, Faults,
                         ::testing::Values(Transport::kTcp, Transport::kUnix, Transport::kShm),
                         [](const auto& info) { return std::string(transportName(info.param)); });

}  // namespace
}  // namespace cumulus::comm
