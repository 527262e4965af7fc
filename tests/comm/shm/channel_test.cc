// The shared-memory channel (comm/shm/channel.h): its offer and answer between two sockets, the
// stamps that tie a slot to its frame, and what can go wrong with slots inside a communicator.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "comm/error.h"
#include "comm/net/frame.h"
#include "comm/net/handshake.h"
#include "comm/rendezvous.h"
#include "comm/shm/channel.h"
#include "tests/comm/fault_peer.h"
#include "tests/comm/socket_pair.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Clock;
using testing::connectToRank0;
using testing::expectBadFrameFromRank1;
using testing::expectCommError;
using testing::Faults;
using testing::RawPeer;
using testing::rawPeer;
using testing::socketPair;
using testing::spawn;
using testing::withTimeout;

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
    bool fill_slot;  // commit a slot stamped for another sequence number first
    const char* message;
  };
  const Case cases[] = {
      {"empty slot", net::kShmFrameMagic, false, "shared-memory slot 0 holds sequence 0"},
      {"stale slot", net::kShmFrameMagic, true, "shared-memory slot 0 holds sequence 9"},
      {"inline", net::kFrameMagic, false, "an inline frame where a shared-memory one was due"},
  };
  for (const Case& c : cases) {
    MemoryStore store;
    std::thread liar([&] {
      RawPeer peer = rawPeer(store, 1, 2, gen, "t0k3n", Transport::kShm);
      if (c.fill_slot) {
        std::memset(peer.channel->acquire(), 0x7f, bytes);
        peer.channel->commit(9, 0, bytes);
      }
      net::FrameHeader h;
      h.magic = c.magic, h.generation = gen, h.sequence = 1, h.length = bytes;
      h.tag = net::frameTag(static_cast<uint8_t>(DType::kFloat32) + 1, 0);  // a float32 op's
      uint8_t header[net::kFrameHeaderBytes];
      net::encodeFrameHeader(h, header);
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
    net::Socket listener = net::Socket::listen("127.0.0.1");
    store.set(hostKey(gen, 1), localHostId());
    store.set(addressKey(gen, 1), listener.localAddress());
    net::Socket socket = connectToRank0(store, gen, Transport::kShm);
    net::connectorHandshake(socket, {gen, 1, 2, "t0k3n"}, 0, Clock::now() + 5s);
    shm::Channel::decline(socket, 0, Clock::now() + 5s);
    // Ring all-reduce of 2 floats, p = 2, as rank 1: send our chunk 0 (3.0), then chunk 1 as
    // the all-gather delivers it (final value 40.0), both inline.
    for (uint32_t tag : {0u, 1u}) {
      net::FrameHeader h;
      h.generation = gen, h.sequence = 1, h.length = 4;
      h.tag = net::frameTag(static_cast<uint8_t>(DType::kFloat32) + 1, tag);
      uint8_t frame[net::kFrameHeaderBytes + 4];
      net::encodeFrameHeader(h, frame);
      const float value = tag == 0 ? 3.0f : 40.0f;
      std::memcpy(frame + net::kFrameHeaderBytes, &value, 4);
      EXPECT_TRUE(socket.writeFull(frame, sizeof frame, Clock::now() + 5s).ok());
    }
    uint8_t sink[2 * (net::kFrameHeaderBytes + 4)];
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
    std::promise<void> waiting;  // rank 0 went to sleep for a slot (outlives the communicators)
    std::atomic<bool> told{false};
    std::vector<std::unique_ptr<Communicator>> comms(2);
    spawn(2, [&](int r) {
      CommunicatorOptions o = withTimeout(10s);
      o.transport = Transport::kShm;
      if (r == 0) {
        o.on_slot_wait = [&] {
          if (!told.exchange(true)) waiting.set_value();
        };
      }
      comms[r] = std::make_unique<Communicator>(r, 2, store, o);
    });
    // 8 MiB from root 0: 16 segments of 512 KiB for 4 slots; rank 1 never joins the broadcast.
    std::vector<float> v(2 << 20, 1.0f);
    Buffer b{v.data(), v.size(), DType::kFloat32};
    std::thread leaver([&] {
      if (!peerLeaves) return;
      // Leave once rank 0 sleeps for a slot (every slot full, rank 1 consuming none).
      EXPECT_EQ(waiting.get_future().wait_for(5s), std::future_status::ready)
          << "rank 0 never waited for a shared-memory slot";
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
// The channel itself, between the two ends of a socket pair.

constexpr uint32_t kSlots = 2;
constexpr size_t kSlotBytes = 64 * 1024;

net::Deadline soon() { return Clock::now() + 5s; }

TEST(Channel, AnOfferedSegmentCarriesAStampedPayload) {
  auto wire = socketPair();
  net::Socket& connectorEnd = wire.first;
  net::Socket& acceptorEnd = wire.second;
  std::unique_ptr<shm::Channel> producer;
  std::thread offer(
      [&] { producer = shm::Channel::offer(connectorEnd, 1, soon(), true, kSlots, kSlotBytes); });
  Result<std::unique_ptr<shm::Channel>> accepted = shm::Channel::accept(acceptorEnd, soon());
  offer.join();
  ASSERT_TRUE(accepted.ok()) << accepted.status().detail();
  std::unique_ptr<shm::Channel> consumer = std::move(accepted.value());
  ASSERT_TRUE(consumer && producer);
  EXPECT_EQ(consumer->slots(), kSlots);
  EXPECT_EQ(consumer->slotBytes(), kSlotBytes);
  EXPECT_TRUE(consumer->carries(shm::kMinShmBytes));
  EXPECT_FALSE(consumer->carries(shm::kMinShmBytes - 1));
  EXPECT_FALSE(consumer->carries(kSlotBytes + 1));

  std::vector<uint8_t> payload(20000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  void* slot = producer->acquire();
  ASSERT_NE(slot, nullptr);
  std::memcpy(slot, payload.data(), payload.size());
  producer->commit(3, 1, payload.size());

  // A frame the slot was not stamped for is refused, naming what the slot holds.
  const Result<const void*> wrong = consumer->front(4, 1, payload.size());
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().kind(), ErrorKind::kBadFrame);
  EXPECT_EQ(wrong.status().detail(),
            "shared-memory slot 0 holds sequence 3 tag 1 (20000 bytes), not the announced frame");
  const Result<const void*> right = consumer->front(3, 1, payload.size());
  ASSERT_TRUE(right.ok()) << right.status().detail();
  EXPECT_EQ(std::memcmp(right.value(), payload.data(), payload.size()), 0);
  consumer->release();
  EXPECT_TRUE(producer->slotFree());
}

TEST(Channel, ADeclinedOfferLeavesNoChannel) {
  auto wire = socketPair();
  net::Socket& connectorEnd = wire.first;
  net::Socket& acceptorEnd = wire.second;
  std::thread decline([&] { shm::Channel::decline(connectorEnd, 1, soon()); });
  Result<std::unique_ptr<shm::Channel>> accepted = shm::Channel::accept(acceptorEnd, soon());
  decline.join();
  ASSERT_TRUE(accepted.ok()) << accepted.status().detail();
  EXPECT_EQ(accepted.value(), nullptr);
}

TEST(Channel, AnInvalidOrMissingOfferIsRefusedSayingWhy) {
  auto wire = socketPair();
  net::Socket& peerEnd = wire.first;
  net::Socket& acceptorEnd = wire.second;
  const Result<std::unique_ptr<shm::Channel>> silent =
      shm::Channel::accept(acceptorEnd, Clock::now() + 50ms);
  ASSERT_FALSE(silent.ok());
  EXPECT_EQ(silent.status().kind(), ErrorKind::kTimeout);
  EXPECT_EQ(silent.status().detail(), "no shared-memory offer arrived before the deadline");

  const uint8_t garbage[24] = {'n', 'o', 'p', 'e'};
  ASSERT_TRUE(peerEnd.writeFull(garbage, sizeof garbage, soon()).ok());
  const Result<std::unique_ptr<shm::Channel>> refused = shm::Channel::accept(acceptorEnd, soon());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().kind(), ErrorKind::kBadFrame);
  EXPECT_EQ(refused.status().detail(), "a same-host peer sent no valid shared-memory offer");
  uint8_t answer[8];
  ASSERT_TRUE(peerEnd.readFull(answer, sizeof answer, soon()).ok());
  EXPECT_EQ(net::loadLe32(answer + 4), 1u) << "the refusal is answered with status 1";
}

}  // namespace
}  // namespace cumulus::comm
