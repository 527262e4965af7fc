// The transfer engine (comm/net/transfer.h) under faults, on every transport: a corrupt frame
// from a raw socket, mismatched counts, a peer that closes its connections, a peer that stalls.
// Each ends in the typed error naming op, seq and peer, well within the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/error.h"
#include "comm/memory_store.h"
#include "comm/net/frame.h"
#include "comm/net/handshake.h"
#include "comm/rendezvous.h"
#include "comm/shm/channel.h"
#include "tests/comm/fault_peer.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Clock;
using testing::expectBadFrameFromRank1;
using testing::expectCommError;
using testing::Faults;
using testing::RawPeer;
using testing::spawn;
using testing::withTimeout;

struct Corruption {
  const char* name;
  net::FrameHeader header;
  const char* message;
};

TEST_P(Faults, CorruptFramesAreBadFramesNamingOpSeqAndPeer) {
  const uint64_t gen = 7;
  const size_t count = 1000;  // ring, p = 2: rank 0 expects 500 floats as message 0
  auto frame = [&](uint32_t magic, uint64_t g, uint64_t seq, uint32_t tag, uint64_t len) {
    net::FrameHeader h;
    h.magic = magic, h.generation = g, h.sequence = seq, h.tag = tag, h.length = len;
    return h;
  };
  // A float32 all-reduce's frames carry float32's element code in the tag's top byte.
  const uint8_t f32 = static_cast<uint8_t>(DType::kFloat32) + 1;
  const uint8_t i32 = static_cast<uint8_t>(DType::kInt32) + 1;
  const Corruption cases[] = {
      {"magic", frame(0xdeadbeef, gen, 1, net::frameTag(f32, 0), 2000), "wrong magic 0xdeadbeef"},
      {"generation", frame(net::kFrameMagic, gen - 1, 1, net::frameTag(f32, 0), 2000),
       "stale generation 6"},
      {"sequence", frame(net::kFrameMagic, gen, 5, net::frameTag(f32, 0), 2000),
       "unexpected sequence 5"},
      {"dtype", frame(net::kFrameMagic, gen, 1, net::frameTag(i32, 0), 2000),
       "rank 1 sent int32 data where float32 data was due (do all ranks pass the same dtype?)"},
      {"tag", frame(net::kFrameMagic, gen, 1, net::frameTag(f32, 3), 2000),
       "unexpected tag 16777219 (expected 16777216)"},
      {"length", frame(net::kFrameMagic, gen, 1, net::frameTag(f32, 0), 1996), "wrong length 1996"},
  };
  for (const Corruption& c : cases) {
    MemoryStore store;
    std::thread liar([&] {
      RawPeer peer = rawPeer(store, 1, 2, gen, "t0k3n");
      net::Socket& socket = peer.socket;
      uint8_t bytes[net::kFrameHeaderBytes];
      net::encodeFrameHeader(c.header, bytes);
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

// A Store that stops answering once frozen (its host went away with the peer): each call blocks
// until the test thaws it.
class FrozenStore : public MemoryStore {
 public:
  void freeze() {
    std::lock_guard<std::mutex> lock(mutex_);
    frozen_ = true;
  }
  void thaw() {
    std::lock_guard<std::mutex> lock(mutex_);
    frozen_ = false;
    thawed_.notify_all();
  }
  // Thaws it after `limit` unless thawed before.
  void thawBy(std::chrono::milliseconds limit) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (thawed_.wait_for(lock, limit, [&] { return !frozen_; })) return;
    }
    thaw();
  }
  std::optional<Bytes> tryGet(const std::string& key) override {
    block();
    return MemoryStore::tryGet(key);
  }
  void set(const std::string& key, const Bytes& value) override {
    block();
    MemoryStore::set(key, value);
  }

 private:
  void block() {
    std::unique_lock<std::mutex> lock(mutex_);
    thawed_.wait(lock, [&] { return !frozen_; });
  }
  std::mutex mutex_;
  std::condition_variable thawed_;
  bool frozen_ = false;
};

TEST_P(Faults, PeerLossIsReportedWhileTheStoreHangs) {
  FrozenStore store;
  std::vector<std::unique_ptr<Communicator>> comms(2);
  spawn(2,
        [&](int r) { comms[r] = std::make_unique<Communicator>(r, 2, store, withTimeout(10s)); });
  store.freeze();
  // Thawed after 30 s at the latest, so that a rank that waits on the Store fails this test by
  // the time below instead of hanging it.
  std::thread thawer([&] { store.thawBy(30s); });
  std::vector<float> v(1 << 16, 1.0f);
  Buffer b{v.data(), v.size(), DType::kFloat32};
  const auto start = Clock::now();
  auto work = comms[0]->allreduceAsync(b, {ReduceOp::kSum, Algorithm::kRing});
  comms[1].reset();
  CommError e = expectCommError([&] { work->wait(); });
  // The failure record cannot be looked up: rank 0 reports what it saw, about a second later.
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed) << e.what();
  EXPECT_EQ(e.peer(), 1) << e.what();
  EXPECT_EQ(std::string(e.what()).find("failed first"), std::string::npos) << e.what();
  store.thaw();
  comms[0].reset();  // waits for the record still being written
  thawer.join();
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
      // Rank 1 sent its part to rank 0 and then waits for the broadcast. When rank 0 gives up
      // first, it records that rank 2 stalled before it closes its connections, and rank 1, which
      // then loses rank 0, names rank 2 too; when rank 1's own deadline comes first, it names
      // rank 0, the peer it waited on.
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
      if (e.peer() == 2) {
        EXPECT_NE(std::string(e.what()).find("rank 2 failed first (rank 0 saw: allreduce seq 1 "
                                             "with rank 2: timeout: "),
                  std::string::npos)
            << e.what();
      } else {
        EXPECT_EQ(e.peer(), 0) << e.what();
      }
    }
    EXPECT_EQ(e.seq(), 1u);
  });
  EXPECT_LT(Clock::now() - start, 1500ms);
}
}  // namespace
}  // namespace cumulus::comm
