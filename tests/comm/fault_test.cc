// Faults end in the typed error, naming op, seq and peer, well within the timeout: a peer that
// never arrives, a wrong job token, a stale generation, a corrupt frame from a raw socket, a
// peer that closes its connections, a peer that stalls.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/error.h"
#include "comm/rendezvous.h"
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

// A hand-driven rank: connects to rank 0 over the transport under test (TCP address, or the
// AF_UNIX name rank 0 published) and completes the handshake.
tcp::Socket rawPeer(Store& store, int rank, int world, uint64_t generation,
                    const std::string& token, Transport transport) {
  tcp::Socket listener = tcp::Socket::listen("127.0.0.1");
  store.set(addressKey(generation, rank), listener.localAddress());
  const std::string address = store.get(addressKey(generation, 0), 5000ms);
  tcp::IoStatus status;
  tcp::Socket socket;
  if (transport == Transport::kUnix) {
    const std::string local = store.get(localKey(generation, 0), 5000ms);
    socket = tcp::Socket::connectUnix(local.substr(local.find('\n') + 1), &status);
  } else {
    socket = tcp::Socket::connect(address, Clock::now() + 5s, &status);
  }
  EXPECT_TRUE(socket.valid()) << status.detail;
  tcp::connectorHandshake(socket, {generation, rank, world, token}, 0, Clock::now() + 5s);
  return socket;
}

// Every fault test runs on both transports: the contract does not depend on the byte stream.
class Faults : public ::testing::TestWithParam<Transport> {
 protected:
  CommunicatorOptions withTimeout(std::chrono::milliseconds timeout, std::string token = "t0k3n",
                                  uint64_t generation = 7) const {
    CommunicatorOptions o = comm::withTimeout(timeout, std::move(token), generation);
    o.transport = GetParam();
    return o;
  }
  tcp::Socket rawPeer(Store& store, int rank, int world, uint64_t generation,
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
  const std::string address = store.get(addressKey(7, 0), 5000ms);
  tcp::IoStatus status;
  tcp::Socket socket;
  if (GetParam() == Transport::kUnix) {
    const std::string local = store.get(localKey(7, 0), 5000ms);
    socket = tcp::Socket::connectUnix(local.substr(local.find('\n') + 1), &status);
  } else {
    socket = tcp::Socket::connect(address, Clock::now() + 5s, &status);
  }
  ASSERT_TRUE(socket.valid()) << status.detail;
  EXPECT_EQ(socket.isUnix(), GetParam() == Transport::kUnix);
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
      tcp::Socket socket = rawPeer(store, 1, 2, gen, "t0k3n");
      uint8_t bytes[tcp::kFrameHeaderBytes];
      tcp::encodeFrameHeader(c.header, bytes);
      std::vector<uint8_t> payload(2000, 0x7f);
      socket.writeFull(bytes, sizeof bytes, Clock::now() + 5s);
      socket.writeFull(payload.data(), payload.size(), Clock::now() + 5s);
      // Hold the connection open until rank 0 gives up, so the only fault is the frame.
      uint8_t sink[4096];
      socket.readFull(sink, sizeof sink, Clock::now() + 5s);
    });
    Communicator comm(0, 2, store, withTimeout(5000ms));
    std::vector<float> v(count, 1.0f);
    Buffer b{v.data(), count, DType::kFloat32};
    const auto start = Clock::now();
    CommError e = expectCommError([&] { comm.allreduce(b, {ReduceOp::kSum, Algorithm::kRing}); });
    EXPECT_LT(Clock::now() - start, 1s) << c.name;
    EXPECT_EQ(e.kind(), ErrorKind::kBadFrame) << c.name << ": " << e.what();
    EXPECT_EQ(e.op(), "allreduce");
    EXPECT_EQ(e.seq(), 1u);
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
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
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    comms[1].reset();  // rank 1 goes away while rank 0 waits in the collective
  });
  const auto start = Clock::now();
  auto work = comms[0]->allreduceAsync(b, {ReduceOp::kSum, Algorithm::kRing});
  CommError e = expectCommError([&] { work->wait(); });
  closer.join();
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

INSTANTIATE_TEST_SUITE_P(Transport, Faults, ::testing::Values(Transport::kTcp, Transport::kUnix),
                         [](const auto& info) { return std::string(transportName(info.param)); });

}  // namespace
}  // namespace cumulus::comm
