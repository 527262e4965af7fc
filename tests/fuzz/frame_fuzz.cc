// The frame header parser of the data plane (comm/net/frame.h) as the transfer engine runs it
// (comm/net/transfer.h: every header checked against the frame that must come next), inline and
// through shared-memory slots (comm/shm/channel.h: the slot's stamp checked against the header).
// The peer's bytes arrive on a socket pair; the receiver expects 1 to 4 messages of operation 3,
// generation 7.
//
// Layout: byte 0: bits 0-1 = number of messages - 1, bit 2 = a shared-memory channel (2 slots of
// 16 KiB) joins the pair. Then one length byte per message: its length in bytes, except that 255
// on a channel means 16 KiB, which travels through a slot. On a channel, one more byte per slot
// message says how the peer stamps its slot: 0 as due, bits 0-2 = a wrong sequence, tag or length,
// bit 3 = not at all (only the first 2 such messages get a slot). The rest is the wire.
//
// A CommError is the expected answer to bad frames or a short stream; a transfer that succeeds
// must have delivered exactly the payload bytes the wire (or the slot) carried.

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/error.h"
#include "comm/net/frame.h"
#include "comm/net/pair.h"
#include "comm/net/transfer.h"
#include "comm/shm/channel.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace net = cumulus::comm::net;
namespace shm = cumulus::comm::shm;
using cumulus::fuzz::check;

constexpr uint64_t kSeq = 3;
constexpr uint64_t kGeneration = 7;
constexpr size_t kSlotBytes = shm::kMinShmBytes;  // the smallest payload a slot carries
constexpr uint32_t kSlots = 2;

uint8_t slotPattern(size_t unit) { return static_cast<uint8_t>(0x40 + unit); }

// Both ends of a same-host pair: ours (the receiver) and the peer's socket and channel.
struct Link {
  std::unique_ptr<net::Pair> ours;
  int peerFd = -1;
  net::Socket peerSocket;
  std::unique_ptr<shm::Channel> peer_channel;

  explicit Link(bool withChannel) {
    int fds[2];
    check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0,
          "socketpair failed");
    net::Socket socket(fds[0]);
    peerSocket = net::Socket(fds[1]);
    peerFd = fds[1];
    std::unique_ptr<shm::Channel> channel;
    if (withChannel) {
      const net::Deadline deadline = net::Clock::now() + std::chrono::seconds(2);
      std::thread offer([&] {
        peer_channel = shm::Channel::offer(peerSocket, 0, deadline, true, kSlots, kSlotBytes);
      });
      cumulus::comm::Result<std::unique_ptr<shm::Channel>> accepted =
          shm::Channel::accept(socket, deadline);
      offer.join();
      check(accepted.ok() && accepted.value() && peer_channel,
            "shared-memory set-up failed: " + accepted.status().detail());
      channel = std::move(accepted.value());
    }
    ours = std::make_unique<net::Pair>(std::move(socket), 1, std::move(channel));
  }

  // What the peer sent; what does not fit the socket buffer is dropped. Then it stops sending.
  void send(const uint8_t* bytes, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(peerFd, bytes, size, MSG_NOSIGNAL);
      if (n <= 0) break;
      bytes += n;
      size -= static_cast<size_t>(n);
    }
    ::shutdown(peerFd, SHUT_WR);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t units = 1 + (data[0] & 3);
  const bool withChannel = (data[0] & 4) != 0;
  size_t at = 1;
  if (size < at + units) return 0;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<bool> viaSlot;
  for (size_t i = 0; i < units; ++i) {
    const bool slot = withChannel && data[at + i] == 255;
    buffers.emplace_back(slot ? kSlotBytes : data[at + i], uint8_t{0xee});
    viaSlot.push_back(slot);
  }
  at += units;

  Link link(withChannel);
  uint32_t stamped = 0;
  for (size_t i = 0; i < units; ++i) {
    if (!viaSlot[i]) continue;
    if (at >= size) return 0;
    const uint8_t how = data[at++];
    if ((how & 8) != 0 || stamped == kSlots) continue;
    void* slot = link.peer_channel->acquire();
    check(slot != nullptr, "a free slot is missing");
    std::memset(slot, slotPattern(i), kSlotBytes);
    link.peer_channel->commit(kSeq ^ (how & 1), static_cast<uint32_t>(i) ^ ((how >> 1) & 1),
                              kSlotBytes ^ ((how >> 2) & 1));
    ++stamped;
  }
  const uint8_t* wire = data + at;
  const size_t wireBytes = size - at;
  link.send(wire, wireBytes);

  net::OpContext ctx;
  ctx.op = "fuzz";
  ctx.seq = kSeq;
  ctx.generation = kGeneration;
  ctx.timeout_ms = 2000;
  ctx.deadline = net::Clock::now() + std::chrono::milliseconds(ctx.timeout_ms);
  net::Transfer transfer;
  transfer.recv_from = link.ours.get();
  transfer.recv_units = units;
  transfer.recv_span = [&](size_t i) { return net::Span{buffers[i].data(), buffers[i].size()}; };
  try {
    net::runTransfer(ctx, transfer);
  } catch (const cumulus::CommError&) {
    return 0;
  }
  // Success: each non-empty message is a header, and its payload unless it came in a slot.
  size_t offset = 0;
  for (size_t i = 0; i < units; ++i) {
    if (buffers[i].empty()) continue;
    const std::string which = "message " + std::to_string(i);
    if (viaSlot[i]) {
      check(offset + net::kFrameHeaderBytes <= wireBytes, which + " arrived without a header");
      check(buffers[i] == std::vector<uint8_t>(kSlotBytes, slotPattern(i)),
            which + " holds other bytes than its slot");
      offset += net::kFrameHeaderBytes;
      continue;
    }
    check(offset + net::kFrameHeaderBytes + buffers[i].size() <= wireBytes,
          which + " received beyond the wire's bytes");
    check(std::memcmp(buffers[i].data(), wire + offset + net::kFrameHeaderBytes,
                      buffers[i].size()) == 0,
          which + " holds other bytes than were sent");
    offset += net::kFrameHeaderBytes + buffers[i].size();
  }
  return 0;
}
