#include "comm/net/transfer.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "comm/error.h"
#include "comm/net/frame.h"
#include "comm/types.h"

namespace cumulus::comm::net {
namespace {

// OpContext::element's words: "float32 data", "raw bytes".
std::string elementName(uint32_t element) {
  if (element == 0) return "raw bytes";
  if (element - 1 <= static_cast<uint32_t>(DType::kInt64)) {
    return std::string(dtypeName(static_cast<DType>(element - 1))) + " data";
  }
  return "data of an unknown element type " + std::to_string(element);
}

bool wouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  for (int i = 0; i < 32; ++i) _mm_pause();
#endif
}

class Engine {
 public:
  Engine(const OpContext& ctx, const Transfer& t) : ctx_(ctx), t_(t) {}

  void run() {
    skipEmptyRecvs();
    // A direction is "blocked" once a call moved less than asked (the socket is drained / full);
    // it is retried only after poll() says it is ready, so no syscall is spent on a sure EAGAIN.
    // Sending goes first: at the start of a step the data to receive is rarely there yet.
    while (sent_ < t_.send_units || received_ < t_.recv_units) {
      if (!send_blocked_ && sendReady()) pumpSend();
      if (!recv_blocked_ && received_ < t_.recv_units) pumpRecv();
      const bool canSend = !send_blocked_ && sendReady();
      const bool canRecv = !recv_blocked_ && received_ < t_.recv_units;
      if (!canSend && !canRecv && (sent_ < t_.send_units || received_ < t_.recv_units)) waitReady();
    }
  }

 private:
  bool sendReady() {
    if (sent_ >= t_.send_units) return false;
    if (!send_loaded_) {
      // Skip empty units; they never touch the wire.
      while (sent_ < t_.send_units) {
        if (t_.send_after_recvs && t_.send_after_recvs(sent_) > received_) {
          waiting_for_slot_ = false;
          return false;
        }
        send_span_ = t_.send_span(sent_);
        if (send_span_.bytes > 0) break;
        ++sent_;
      }
      if (sent_ >= t_.send_units) return false;
      shm::Channel* channel = t_.send_to->channel();
      const bool viaShm = channel != nullptr && channel->carries(send_span_.bytes);
      if (viaShm) {
        void* slot = channel->acquire();
        if (slot == nullptr) {
          waiting_for_slot_ = true;  // every slot is still being read by the peer
          return false;
        }
        std::memcpy(slot, send_span_.data, send_span_.bytes);
        channel->commit(ctx_.seq, static_cast<uint32_t>(sent_), send_span_.bytes);
      }
      waiting_for_slot_ = false;
      FrameHeader h;
      h.magic = viaShm ? kShmFrameMagic : kFrameMagic;
      h.tag = frameTag(ctx_.element, sent_);
      h.generation = ctx_.generation;
      h.sequence = ctx_.seq;
      h.length = send_span_.bytes;
      encodeFrameHeader(h, send_header_);
      send_wire_bytes_ = viaShm ? 0 : send_span_.bytes;
      send_offset_ = 0;
      send_loaded_ = true;
    }
    return true;
  }

  // Sends as much of the loaded unit (and the next ready ones) as the socket takes now.
  bool pumpSend() {
    bool progress = false;
    while (sendReady()) {
      iovec iov[2];
      int n = 0;
      if (send_offset_ < kFrameHeaderBytes) {
        iov[n++] = {send_header_ + send_offset_, kFrameHeaderBytes - send_offset_};
        if (send_wire_bytes_ > 0) iov[n++] = {send_span_.data, send_wire_bytes_};
      } else {
        size_t off = send_offset_ - kFrameHeaderBytes;
        iov[n++] = {static_cast<char*>(send_span_.data) + off, send_wire_bytes_ - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const size_t asked = iov[0].iov_len + (n > 1 ? iov[1].iov_len : 0);
      ssize_t rc = ::sendmsg(t_.send_to->fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (rc < 0) {
        if (wouldBlock(errno)) {
          send_blocked_ = errno != EINTR;
          return progress;
        }
        fail(ErrorKind::kPeerClosed, t_.send_to->peer(),
             std::string("send failed: ") + std::strerror(errno));
      }
      progress = true;
      send_offset_ += static_cast<size_t>(rc);
      if (send_offset_ == kFrameHeaderBytes + send_wire_bytes_) {
        if (shm::Channel* channel = t_.send_to->channel()) channel->announce();
        if (ctx_.bytes_sent != nullptr) {
          ctx_.bytes_sent->fetch_add(kFrameHeaderBytes + send_span_.bytes,
                                     std::memory_order_relaxed);
        }
        ++sent_;
        send_loaded_ = false;
      }
      if (static_cast<size_t>(rc) < asked) {
        send_blocked_ = true;  // the send buffer is full
        return progress;
      }
    }
    return progress;
  }

  void skipEmptyRecvs() {
    while (received_ < t_.recv_units) {
      recv_span_ = t_.recv_span(received_);
      if (recv_span_.bytes > 0) {
        shm::Channel* channel = t_.recv_from->channel();
        recv_via_shm_ = channel != nullptr && channel->carries(recv_span_.bytes);
        recv_wire_bytes_ = recv_via_shm_ ? 0 : recv_span_.bytes;
        break;
      }
      if (t_.on_received) t_.on_received(received_);
      ++received_;
    }
    recv_offset_ = 0;
  }

  // Receives header and payload of the current unit straight into their destinations.
  bool pumpRecv() {
    bool progress = false;
    // What the peer had announced before we looked: spin() waits for it to move.
    if (shm::Channel* channel = t_.recv_from->channel()) recv_mark_ = channel->peerAnnounced();
    while (received_ < t_.recv_units) {
      iovec iov[2];
      int n = 0;
      if (recv_offset_ < kFrameHeaderBytes) {
        iov[n++] = {recv_header_ + recv_offset_, kFrameHeaderBytes - recv_offset_};
        // Read the payload in the same call only when the header is complete in this read;
        // reading exactly header + expected length never touches the next unit.
        if (recv_wire_bytes_ > 0) iov[n++] = {recv_span_.data, recv_wire_bytes_};
      } else {
        size_t off = recv_offset_ - kFrameHeaderBytes;
        iov[n++] = {static_cast<char*>(recv_span_.data) + off, recv_wire_bytes_ - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const size_t asked = iov[0].iov_len + (n > 1 ? iov[1].iov_len : 0);
      ssize_t rc = ::recvmsg(t_.recv_from->fd(), &msg, MSG_DONTWAIT);
      if (rc == 0) {
        fail(ErrorKind::kPeerClosed, t_.recv_from->peer(),
             "connection closed after " + std::to_string(received_) + " of " +
                 std::to_string(t_.recv_units) + " messages");
      }
      if (rc < 0) {
        if (wouldBlock(errno)) {
          recv_blocked_ = errno != EINTR;
          return progress;
        }
        fail(ErrorKind::kPeerClosed, t_.recv_from->peer(),
             std::string("receive failed: ") + std::strerror(errno));
      }
      progress = true;
      const bool headerWasIncomplete = recv_offset_ < kFrameHeaderBytes;
      recv_offset_ += static_cast<size_t>(rc);
      if (headerWasIncomplete && recv_offset_ >= kFrameHeaderBytes) checkHeader();
      if (recv_offset_ == kFrameHeaderBytes + recv_wire_bytes_) {
        if (recv_via_shm_) {
          consumeSlot();
        } else if (t_.on_received) {
          t_.on_received(received_);
        }
        ++received_;
        skipEmptyRecvs();
      }
      if (static_cast<size_t>(rc) < asked) {
        recv_blocked_ = true;  // drained for now
        return progress;
      }
    }
    return progress;
  }

  // The payload of the current unit lies in the peer's slot: use it there, then free the slot.
  void consumeSlot() {
    shm::Channel* channel = t_.recv_from->channel();
    Result<const void*> slot =
        channel->front(ctx_.seq, static_cast<uint32_t>(received_), recv_span_.bytes);
    if (!slot.ok()) {
      fail(slot.status().kind(), t_.recv_from->peer(),
           slot.status().detail() + " in message " + std::to_string(received_));
    }
    const void* data = slot.value();
    if (t_.recv_in_place) {
      t_.recv_in_place(received_, data);
    } else {
      std::memcpy(recv_span_.data, data, recv_span_.bytes);
      if (t_.on_received) t_.on_received(received_);
    }
    channel->release();
  }

  void checkHeader() {
    const FrameHeader h = decodeFrameHeader(recv_header_);
    const int peer = t_.recv_from->peer();
    auto bad = [&](const std::string& what) {
      fail(ErrorKind::kBadFrame, peer, what + " in message " + std::to_string(received_));
    };
    if (h.magic != kFrameMagic && h.magic != kShmFrameMagic) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%08x", h.magic);
      bad(std::string("wrong magic ") + hex);
    }
    if (h.generation != ctx_.generation) {
      bad("stale generation " + std::to_string(h.generation) + " (expected " +
          std::to_string(ctx_.generation) + ")");
    }
    if (h.sequence != ctx_.seq) {
      bad("unexpected sequence " + std::to_string(h.sequence) +
          " (the ranks disagree on the order of collectives)");
    }
    if (h.tag >> kTagIndexBits != ctx_.element) {
      bad("rank " + std::to_string(peer) + " sent " + elementName(h.tag >> kTagIndexBits) +
          " where " + elementName(ctx_.element) + " was due (do all ranks pass the same dtype?)");
    }
    if (h.tag != frameTag(ctx_.element, received_)) {
      bad("unexpected tag " + std::to_string(h.tag) + " (expected " +
          std::to_string(frameTag(ctx_.element, received_)) + ")");
    }
    if (h.length != recv_span_.bytes) {
      bad("wrong length " + std::to_string(h.length) + " (expected " +
          std::to_string(recv_span_.bytes) + "; do all ranks pass the same count and dtype?)");
    }
    if ((h.magic == kShmFrameMagic) != recv_via_shm_) {
      bad(recv_via_shm_ ? "an inline frame where a shared-memory one was due"
                        : "a shared-memory frame where an inline one was due");
    }
  }

  // Busy-waits (within the governor's budget and back-off) on shared memory for what we wait
  // for: the peer announcing a frame, or freeing a slot. Returns true when there is something to
  // do; false: sleep.
  bool spin(bool wantRecv, bool wantSlot) {
    SpinGovernor* g = ctx_.spin;
    if (g == nullptr || g->budget_us <= 0) return false;
    shm::Channel* in = wantRecv ? t_.recv_from->channel() : nullptr;
    shm::Channel* out = wantSlot ? t_.send_to->channel() : nullptr;
    if ((wantRecv && in == nullptr) || (in == nullptr && out == nullptr)) return false;
    if (!g->shouldSpin()) return false;
    const Deadline until = Clock::now() + std::chrono::microseconds(g->budget_us);
    for (unsigned i = 1;; ++i) {
      if (in != nullptr && in->peerAnnounced() != recv_mark_) {
        recv_blocked_ = false;
        g->record(false);
        return true;
      }
      if (out != nullptr && out->slotFree()) {
        g->record(false);
        return true;
      }
      if (i % 16 == 0 && Clock::now() >= until) break;
      cpuRelax();
    }
    g->record(true);
    return false;
  }

  void waitReady() {
    pollfd fds[3];
    int n = 0;
    const bool wantRecv = received_ < t_.recv_units;
    const bool wantSend = sendReady();  // false while gated or while every slot is in use
    const bool wantSlot = !wantSend && waiting_for_slot_;
    if (!wantSend && spin(wantRecv, wantSlot)) return;
    if (wantSlot && !t_.send_to->channel()->armCreditWait()) return;  // freed meanwhile
    if (wantSlot && ctx_.on_slot_wait != nullptr) (*ctx_.on_slot_wait)();
    auto add = [&](int fd, short events) {
      for (int i = 0; i < n; ++i) {
        if (fds[i].fd == fd) {
          fds[i].events |= events;
          return;
        }
      }
      fds[n++] = {fd, events, 0};
    };
    if (wantRecv) add(t_.recv_from->fd(), POLLIN);
    if (wantSend) add(t_.send_to->fd(), POLLOUT);
    // Waiting for a slot, the socket still tells us that the peer is gone (POLLRDHUP: it closed,
    // or our own abort() shut it down).
    if (wantSlot) {
      add(t_.send_to->channel()->creditFd(), POLLIN);
      add(t_.send_to->fd(), POLLRDHUP);
    }
    if (n == 0) return;  // cannot happen: a gated send always has a pending receive
    int rc = ::poll(fds, n, pollTimeoutMs(ctx_.deadline));
    if (rc < 0 && errno == EINTR) return;
    if (rc == 0) {
      const int peer = wantRecv ? t_.recv_from->peer() : t_.send_to->peer();
      const char* what = wantRecv   ? "waiting to receive"
                         : wantSlot ? "waiting for a free shared-memory slot"
                                    : "waiting to send";
      fail(ErrorKind::kTimeout, peer,
           std::string("no progress within the ") + std::to_string(ctx_.timeout_ms) +
               " ms timeout while " + what + " (received " + std::to_string(received_) + "/" +
               std::to_string(t_.recv_units) + ", sent " + std::to_string(sent_) + "/" +
               std::to_string(t_.send_units) + " messages)");
    }
    // Any readiness (POLLERR/POLLHUP included) unblocks the direction: the next sendmsg/recvmsg
    // then moves data or reports the failure precisely.
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (wantRecv && fds[i].fd == t_.recv_from->fd() && (fds[i].revents & ~POLLOUT)) {
        recv_blocked_ = false;
      }
      if (wantSend && fds[i].fd == t_.send_to->fd() && (fds[i].revents & ~POLLIN)) {
        send_blocked_ = false;
      }
      if (wantSlot && fds[i].fd == t_.send_to->channel()->creditFd()) {
        t_.send_to->channel()->drainCredits();
      }
      if (wantSlot && fds[i].fd == t_.send_to->fd() &&
          (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        fail(ErrorKind::kPeerClosed, t_.send_to->peer(),
             "connection closed while waiting for a free shared-memory slot (sent " +
                 std::to_string(sent_) + "/" + std::to_string(t_.send_units) + " messages)");
      }
    }
  }

  [[noreturn]] void fail(ErrorKind kind, int peer, const std::string& detail) {
    throw CommError(kind, ctx_.op, ctx_.seq, peer, detail);
  }

  const OpContext& ctx_;
  const Transfer& t_;

  size_t sent_ = 0;
  bool send_loaded_ = false;
  bool waiting_for_slot_ = false;  // the next unit needs a shared-memory slot and none is free
  Span send_span_;
  size_t send_wire_bytes_ = 0;  // payload bytes on the socket: 0 when it went through a slot
  size_t send_offset_ = 0;
  uint8_t send_header_[kFrameHeaderBytes];

  bool send_blocked_ = false;
  bool recv_blocked_ = false;

  size_t received_ = 0;
  Span recv_span_;
  uint64_t recv_mark_ = 0;      // the peer's announced() count when we last tried to receive
  bool recv_via_shm_ = false;   // the current unit's payload is in a shared-memory slot
  size_t recv_wire_bytes_ = 0;  // payload bytes to read from the socket
  size_t recv_offset_ = 0;
  uint8_t recv_header_[kFrameHeaderBytes];
};

}  // namespace

void runTransfer(const OpContext& ctx, const Transfer& transfer) { Engine(ctx, transfer).run(); }

}  // namespace cumulus::comm::net
