#include "comm/tcp/transfer.h"

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
#include "comm/tcp/frame.h"

namespace cumulus::comm::tcp {
namespace {

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
    while (sent_ < t_.sendUnits || received_ < t_.recvUnits) {
      if (!sendBlocked_ && sendReady()) pumpSend();
      if (!recvBlocked_ && received_ < t_.recvUnits) pumpRecv();
      const bool canSend = !sendBlocked_ && sendReady();
      const bool canRecv = !recvBlocked_ && received_ < t_.recvUnits;
      if (!canSend && !canRecv && (sent_ < t_.sendUnits || received_ < t_.recvUnits)) waitReady();
    }
  }

 private:
  bool sendReady() {
    if (sent_ >= t_.sendUnits) return false;
    if (!sendLoaded_) {
      // Skip empty units; they never touch the wire.
      while (sent_ < t_.sendUnits) {
        if (t_.sendAfterRecvs && t_.sendAfterRecvs(sent_) > received_) {
          waitingForSlot_ = false;
          return false;
        }
        sendSpan_ = t_.sendSpan(sent_);
        if (sendSpan_.bytes > 0) break;
        ++sent_;
      }
      if (sent_ >= t_.sendUnits) return false;
      shm::Channel* channel = t_.sendTo->channel();
      const bool viaShm = channel != nullptr && channel->carries(sendSpan_.bytes);
      if (viaShm) {
        void* slot = channel->acquire();
        if (slot == nullptr) {
          waitingForSlot_ = true;  // every slot is still being read by the peer
          return false;
        }
        std::memcpy(slot, sendSpan_.data, sendSpan_.bytes);
        channel->commit(ctx_.seq, static_cast<uint32_t>(sent_), sendSpan_.bytes);
      }
      waitingForSlot_ = false;
      FrameHeader h;
      h.magic = viaShm ? kShmFrameMagic : kFrameMagic;
      h.tag = static_cast<uint32_t>(sent_);
      h.generation = ctx_.generation;
      h.sequence = ctx_.seq;
      h.length = sendSpan_.bytes;
      encodeFrameHeader(h, sendHeader_);
      sendWireBytes_ = viaShm ? 0 : sendSpan_.bytes;
      sendOffset_ = 0;
      sendLoaded_ = true;
    }
    return true;
  }

  // Sends as much of the loaded unit (and the next ready ones) as the socket takes now.
  bool pumpSend() {
    bool progress = false;
    while (sendReady()) {
      iovec iov[2];
      int n = 0;
      if (sendOffset_ < kFrameHeaderBytes) {
        iov[n++] = {sendHeader_ + sendOffset_, kFrameHeaderBytes - sendOffset_};
        if (sendWireBytes_ > 0) iov[n++] = {sendSpan_.data, sendWireBytes_};
      } else {
        size_t off = sendOffset_ - kFrameHeaderBytes;
        iov[n++] = {static_cast<char*>(sendSpan_.data) + off, sendWireBytes_ - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const size_t asked = iov[0].iov_len + (n > 1 ? iov[1].iov_len : 0);
      ssize_t rc = ::sendmsg(t_.sendTo->fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (rc < 0) {
        if (wouldBlock(errno)) {
          sendBlocked_ = errno != EINTR;
          return progress;
        }
        fail(ErrorKind::kPeerClosed, t_.sendTo->peer(),
             std::string("send failed: ") + std::strerror(errno));
      }
      progress = true;
      sendOffset_ += static_cast<size_t>(rc);
      if (sendOffset_ == kFrameHeaderBytes + sendWireBytes_) {
        if (shm::Channel* channel = t_.sendTo->channel()) channel->announce();
        ++sent_;
        sendLoaded_ = false;
      }
      if (static_cast<size_t>(rc) < asked) {
        sendBlocked_ = true;  // the send buffer is full
        return progress;
      }
    }
    return progress;
  }

  void skipEmptyRecvs() {
    while (received_ < t_.recvUnits) {
      recvSpan_ = t_.recvSpan(received_);
      if (recvSpan_.bytes > 0) {
        shm::Channel* channel = t_.recvFrom->channel();
        recvViaShm_ = channel != nullptr && channel->carries(recvSpan_.bytes);
        recvWireBytes_ = recvViaShm_ ? 0 : recvSpan_.bytes;
        break;
      }
      if (t_.onReceived) t_.onReceived(received_);
      ++received_;
    }
    recvOffset_ = 0;
  }

  // Receives header and payload of the current unit straight into their destinations.
  bool pumpRecv() {
    bool progress = false;
    // What the peer had announced before we looked: spin() waits for it to move.
    if (shm::Channel* channel = t_.recvFrom->channel()) recvMark_ = channel->peerAnnounced();
    while (received_ < t_.recvUnits) {
      iovec iov[2];
      int n = 0;
      if (recvOffset_ < kFrameHeaderBytes) {
        iov[n++] = {recvHeader_ + recvOffset_, kFrameHeaderBytes - recvOffset_};
        // Read the payload in the same call only when the header is complete in this read;
        // reading exactly header + expected length never touches the next unit.
        if (recvWireBytes_ > 0) iov[n++] = {recvSpan_.data, recvWireBytes_};
      } else {
        size_t off = recvOffset_ - kFrameHeaderBytes;
        iov[n++] = {static_cast<char*>(recvSpan_.data) + off, recvWireBytes_ - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const size_t asked = iov[0].iov_len + (n > 1 ? iov[1].iov_len : 0);
      ssize_t rc = ::recvmsg(t_.recvFrom->fd(), &msg, MSG_DONTWAIT);
      if (rc == 0) {
        fail(ErrorKind::kPeerClosed, t_.recvFrom->peer(),
             "connection closed after " + std::to_string(received_) + " of " +
                 std::to_string(t_.recvUnits) + " messages");
      }
      if (rc < 0) {
        if (wouldBlock(errno)) {
          recvBlocked_ = errno != EINTR;
          return progress;
        }
        fail(ErrorKind::kPeerClosed, t_.recvFrom->peer(),
             std::string("receive failed: ") + std::strerror(errno));
      }
      progress = true;
      const bool headerWasIncomplete = recvOffset_ < kFrameHeaderBytes;
      recvOffset_ += static_cast<size_t>(rc);
      if (headerWasIncomplete && recvOffset_ >= kFrameHeaderBytes) checkHeader();
      if (recvOffset_ == kFrameHeaderBytes + recvWireBytes_) {
        if (recvViaShm_) {
          consumeSlot();
        } else if (t_.onReceived) {
          t_.onReceived(received_);
        }
        ++received_;
        skipEmptyRecvs();
      }
      if (static_cast<size_t>(rc) < asked) {
        recvBlocked_ = true;  // drained for now
        return progress;
      }
    }
    return progress;
  }

  // The payload of the current unit lies in the peer's slot: use it there, then free the slot.
  void consumeSlot() {
    shm::Channel* channel = t_.recvFrom->channel();
    Result<const void*> slot =
        channel->front(ctx_.seq, static_cast<uint32_t>(received_), recvSpan_.bytes);
    if (!slot.ok()) {
      fail(slot.status().kind(), t_.recvFrom->peer(),
           slot.status().detail() + " in message " + std::to_string(received_));
    }
    const void* data = slot.value();
    if (t_.recvInPlace) {
      t_.recvInPlace(received_, data);
    } else {
      std::memcpy(recvSpan_.data, data, recvSpan_.bytes);
      if (t_.onReceived) t_.onReceived(received_);
    }
    channel->release();
  }

  void checkHeader() {
    const FrameHeader h = decodeFrameHeader(recvHeader_);
    const int peer = t_.recvFrom->peer();
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
    if (h.tag != static_cast<uint32_t>(received_)) {
      bad("unexpected tag " + std::to_string(h.tag) + " (expected " + std::to_string(received_) +
          ")");
    }
    if (h.length != recvSpan_.bytes) {
      bad("wrong length " + std::to_string(h.length) + " (expected " +
          std::to_string(recvSpan_.bytes) + "; do all ranks pass the same count and dtype?)");
    }
    if ((h.magic == kShmFrameMagic) != recvViaShm_) {
      bad(recvViaShm_ ? "an inline frame where a shared-memory one was due"
                      : "a shared-memory frame where an inline one was due");
    }
  }

  // Busy-waits (within the governor's budget and back-off) on shared memory for what we wait
  // for: the peer announcing a frame, or freeing a slot. Returns true when there is something to
  // do; false: sleep.
  bool spin(bool wantRecv, bool wantSlot) {
    SpinGovernor* g = ctx_.spin;
    if (g == nullptr || g->budgetUs <= 0) return false;
    shm::Channel* in = wantRecv ? t_.recvFrom->channel() : nullptr;
    shm::Channel* out = wantSlot ? t_.sendTo->channel() : nullptr;
    if ((wantRecv && in == nullptr) || (in == nullptr && out == nullptr)) return false;
    if (!g->shouldSpin()) return false;
    const Deadline until = Clock::now() + std::chrono::microseconds(g->budgetUs);
    for (unsigned i = 1;; ++i) {
      if (in != nullptr && in->peerAnnounced() != recvMark_) {
        recvBlocked_ = false;
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
    const bool wantRecv = received_ < t_.recvUnits;
    const bool wantSend = sendReady();  // false while gated or while every slot is in use
    const bool wantSlot = !wantSend && waitingForSlot_;
    if (!wantSend && spin(wantRecv, wantSlot)) return;
    if (wantSlot && !t_.sendTo->channel()->armCreditWait()) return;  // freed meanwhile
    if (wantSlot && ctx_.slotWaits != nullptr) ctx_.slotWaits->fetch_add(1);
    auto add = [&](int fd, short events) {
      for (int i = 0; i < n; ++i) {
        if (fds[i].fd == fd) {
          fds[i].events |= events;
          return;
        }
      }
      fds[n++] = {fd, events, 0};
    };
    if (wantRecv) add(t_.recvFrom->fd(), POLLIN);
    if (wantSend) add(t_.sendTo->fd(), POLLOUT);
    // Waiting for a slot, the socket still tells us that the peer is gone (POLLRDHUP: it closed,
    // or our own abort() shut it down).
    if (wantSlot) {
      add(t_.sendTo->channel()->creditFd(), POLLIN);
      add(t_.sendTo->fd(), POLLRDHUP);
    }
    if (n == 0) return;  // cannot happen: a gated send always has a pending receive
    int rc = ::poll(fds, n, pollTimeoutMs(ctx_.deadline));
    if (rc < 0 && errno == EINTR) return;
    if (rc == 0) {
      const int peer = wantRecv ? t_.recvFrom->peer() : t_.sendTo->peer();
      const char* what = wantRecv   ? "waiting to receive"
                         : wantSlot ? "waiting for a free shared-memory slot"
                                    : "waiting to send";
      fail(ErrorKind::kTimeout, peer,
           std::string("no progress within the ") + std::to_string(ctx_.timeoutMs) +
               " ms timeout: " + what + " (received " + std::to_string(received_) + "/" +
               std::to_string(t_.recvUnits) + ", sent " + std::to_string(sent_) + "/" +
               std::to_string(t_.sendUnits) + " messages)");
    }
    // Any readiness (POLLERR/POLLHUP included) unblocks the direction: the next sendmsg/recvmsg
    // then moves data or reports the failure precisely.
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (wantRecv && fds[i].fd == t_.recvFrom->fd() && (fds[i].revents & ~POLLOUT)) {
        recvBlocked_ = false;
      }
      if (wantSend && fds[i].fd == t_.sendTo->fd() && (fds[i].revents & ~POLLIN)) {
        sendBlocked_ = false;
      }
      if (wantSlot && fds[i].fd == t_.sendTo->channel()->creditFd()) {
        t_.sendTo->channel()->drainCredits();
      }
      if (wantSlot && fds[i].fd == t_.sendTo->fd() &&
          (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        fail(ErrorKind::kPeerClosed, t_.sendTo->peer(),
             "connection closed while waiting for a free shared-memory slot (sent " +
                 std::to_string(sent_) + "/" + std::to_string(t_.sendUnits) + " messages)");
      }
    }
  }

  [[noreturn]] void fail(ErrorKind kind, int peer, const std::string& detail) {
    throw CommError(kind, ctx_.op, ctx_.seq, peer, detail);
  }

  const OpContext& ctx_;
  const Transfer& t_;

  size_t sent_ = 0;
  bool sendLoaded_ = false;
  bool waitingForSlot_ = false;  // the next unit needs a shared-memory slot and none is free
  Span sendSpan_;
  size_t sendWireBytes_ = 0;  // payload bytes on the socket: 0 when it went through a slot
  size_t sendOffset_ = 0;
  uint8_t sendHeader_[kFrameHeaderBytes];

  bool sendBlocked_ = false;
  bool recvBlocked_ = false;

  size_t received_ = 0;
  Span recvSpan_;
  uint64_t recvMark_ = 0;     // the peer's announced() count when we last tried to receive
  bool recvViaShm_ = false;   // the current unit's payload is in a shared-memory slot
  size_t recvWireBytes_ = 0;  // payload bytes to read from the socket
  size_t recvOffset_ = 0;
  uint8_t recvHeader_[kFrameHeaderBytes];
};

}  // namespace

void runTransfer(const OpContext& ctx, const Transfer& transfer) { Engine(ctx, transfer).run(); }

}  // namespace cumulus::comm::tcp
