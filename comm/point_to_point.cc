#include "comm/point_to_point.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <string>

#include "comm/error.h"
#include "comm/net/frame.h"

namespace cumulus::comm {

using net::Clock;
using net::Deadline;

struct PointToPoint::Send {
  int peer = 0;
  uint32_t tag = 0;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  Deadline deadline;
  long timeout_ms = 0;
  std::shared_ptr<Work> work;
};

struct PointToPoint::Receive {
  int source = kAnySource;
  uint32_t tag = 0;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  Deadline deadline;
  long timeout_ms = 0;
  std::shared_ptr<ReceiveWork> work;

  bool takes(int from, uint32_t messageTag) const {
    return (source == kAnySource || source == from) && tag == messageTag;
  }
};

namespace {

using Send = PointToPoint::Send;
using Receive = PointToPoint::Receive;

// A message that arrived before any receive took it, or is still arriving.
struct Buffered {
  int source = 0;
  uint32_t tag = 0;
  std::vector<uint8_t> bytes;
  bool complete = false;
  bool dropped = false;            // matched to a receive of another size: nobody gets it
  std::shared_ptr<Receive> taker;  // matched while still arriving
};

// Where the payload a lane is reading goes.
enum class Sink { kReceive, kBuffer, kDiscard };

struct Incoming {
  uint8_t header[net::kFrameHeaderBytes] = {};
  size_t header_got = 0;
  bool in_payload = false;
  net::FrameHeader frame;
  size_t got = 0;
  Sink sink = Sink::kDiscard;
  std::shared_ptr<Receive> receive;    // Sink::kReceive
  std::shared_ptr<Buffered> buffered;  // Sink::kBuffer
};

// More than any message of a tensor: a header that says so is garbage or a lie, refused before
// anything is allocated for it (a smaller one that still cannot be allocated is refused too).
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 40;

std::string tagText(uint32_t tag) { return "tag " + std::to_string(static_cast<int32_t>(tag)); }

std::string fromText(int source) {
  return source == PointToPoint::kAnySource ? "any source" : "rank " + std::to_string(source);
}

std::exception_ptr error(ErrorKind kind, const Work& work, int peer, const std::string& detail) {
  return std::make_exception_ptr(CommError(kind, work.op(), work.seq(), peer, detail));
}

}  // namespace

// One peer's lane: its socket, the sends queued on it, the message it is reading.
struct Lane {
  int peer = 0;
  net::Socket socket;
  bool open = false;
  ErrorKind closed_kind = ErrorKind::kPeerClosed;
  std::string closed_why;  // when !open

  std::deque<std::shared_ptr<Send>> sends;  // front() is being written
  size_t head_written = 0;                  // of the front's header and payload
  uint8_t head_header[net::kFrameHeaderBytes] = {};
  uint64_t sent_seq = 0;

  Incoming in;
  uint64_t received_seq = 0;
};

class PointToPoint::Engine {
 public:
  Engine(int rank, uint64_t generation, std::vector<net::Socket> sockets,
         std::atomic<uint64_t>* bytes_sent)
      : rank_(rank), generation_(generation), bytes_sent_(bytes_sent), discard_(64 * 1024) {
    for (size_t peer = 0; peer < sockets.size(); ++peer) {
      auto lane = std::make_unique<Lane>();
      lane->peer = static_cast<int>(peer);
      lane->open = static_cast<int>(peer) != rank && sockets[peer].valid();
      lane->socket = std::move(sockets[peer]);
      if (!lane->open) lane->closed_why = "there is no point-to-point lane to it";
      lanes_.push_back(std::move(lane));
    }
  }

  void addSend(std::shared_ptr<Send> send) {
    Lane& lane = *lanes_[static_cast<size_t>(send->peer)];
    if (!lane.open) {
      send->work->finish(error(lane.closed_kind, *send->work, send->peer, lane.closed_why));
      return;
    }
    lane.sends.push_back(std::move(send));
  }

  void addReceive(std::shared_ptr<Receive> receive) {
    for (auto it = buffered_.begin(); it != buffered_.end(); ++it) {
      Buffered& b = **it;
      if (b.taker || b.dropped || !receive->takes(b.source, b.tag)) continue;
      if (b.bytes.size() != receive->bytes) {
        failSize(*receive, b.source, b.bytes.size());
        b.dropped = true;
        if (b.complete) buffered_.erase(it);
        return;
      }
      if (!b.complete) {
        b.taker = std::move(receive);
        return;
      }
      deliver(*receive, b);
      buffered_.erase(it);
      return;
    }
    if (receive->source != kAnySource && !lanes_[static_cast<size_t>(receive->source)]->open) {
      const Lane& lane = *lanes_[static_cast<size_t>(receive->source)];
      receive->work->finish(error(lane.closed_kind, *receive->work, lane.peer, lane.closed_why));
      return;
    }
    if (receive->source == kAnySource && !anyOpen()) {
      receive->work->finish(error(ErrorKind::kPeerClosed, *receive->work, kAnySource,
                                  "every point-to-point lane is closed"));
      return;
    }
    pending_.push_back(std::move(receive));
  }

  // Fails what is past its deadline at `now`.
  void expire(Deadline now) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if ((*it)->deadline > now) {
        ++it;
        continue;
      }
      const Receive& r = **it;
      r.work->finish(error(ErrorKind::kTimeout, *r.work, r.source,
                           "nothing from " + fromText(r.source) + " with " + tagText(r.tag) +
                               " arrived within " + std::to_string(r.timeout_ms) + " ms"));
      it = pending_.erase(it);
    }
    for (auto& b : buffered_) {
      if (b->taker && b->taker->deadline <= now) {
        failPartial(*b->taker, b->source);
        b->taker.reset();
      }
    }
    for (auto& lane : lanes_) expireLane(*lane, now);
  }

  Deadline nextDeadline() const {
    Deadline next = Deadline::max();
    for (const auto& r : pending_) next = std::min(next, r->deadline);
    for (const auto& b : buffered_) {
      if (b->taker) next = std::min(next, b->taker->deadline);
    }
    for (const auto& lane : lanes_) {
      for (const auto& s : lane->sends) next = std::min(next, s->deadline);
      if (lane->in.receive) next = std::min(next, lane->in.receive->deadline);
    }
    return next;
  }

  // The open lanes to poll, and for each whether it has something to write.
  void pollSet(std::vector<pollfd>& fds, std::vector<int>& peers) const {
    for (const auto& lane : lanes_) {
      if (!lane->open) continue;
      const short events = static_cast<short>(POLLIN | (lane->sends.empty() ? 0 : POLLOUT));
      fds.push_back({lane->socket.fd(), events, 0});
      peers.push_back(lane->peer);
    }
  }

  void onEvents(int peer, short revents) {
    Lane& lane = *lanes_[static_cast<size_t>(peer)];
    if (revents & (POLLIN | POLLHUP | POLLERR)) read(lane);
    if (lane.open && (revents & POLLOUT)) write(lane);
  }

  // Shuts every lane; everything pending fails with `kind` and `why`.
  void closeAll(ErrorKind kind, const std::string& why) {
    for (auto& lane : lanes_) close(*lane, kind, why);
    for (auto& r : pending_) r->work->finish(error(kind, *r->work, r->source, why));
    pending_.clear();
    for (auto& b : buffered_) {
      if (b->taker) b->taker->work->finish(error(kind, *b->taker->work, b->source, why));
    }
    buffered_.clear();
  }

 private:
  bool anyOpen() const {
    return std::any_of(lanes_.begin(), lanes_.end(), [](const auto& l) { return l->open; });
  }

  void deliver(const Receive& r, const Buffered& b) {
    if (!b.bytes.empty()) std::memcpy(r.data, b.bytes.data(), b.bytes.size());
    r.work->setSource(b.source);
    r.work->finish(nullptr);
  }

  void failSize(const Receive& r, int from, size_t sent) {
    r.work->finish(error(ErrorKind::kInvalid, *r.work, from,
                         "rank " + std::to_string(from) + " sent " + std::to_string(sent) +
                             " bytes with " + tagText(r.tag) + " to a receive of " +
                             std::to_string(r.bytes) + " bytes on rank " + std::to_string(rank_) +
                             " (do both pass the same count and dtype?); the message is dropped"));
  }

  void failPartial(const Receive& r, int from) {
    r.work->finish(error(ErrorKind::kTimeout, *r.work, from,
                         "the message from rank " + std::to_string(from) + " with " +
                             tagText(r.tag) + " did not arrive whole within " +
                             std::to_string(r.timeout_ms) + " ms"));
  }

  void expireLane(Lane& lane, Deadline now) {
    if (lane.in.receive && lane.in.receive->deadline <= now) {
      failPartial(*lane.in.receive, lane.peer);
      lane.in.receive.reset();
      lane.in.sink = Sink::kDiscard;  // the rest of it is read and dropped
    }
    for (size_t i = 0; i < lane.sends.size();) {
      const Send& s = *lane.sends[i];
      if (s.deadline > now) {
        ++i;
        continue;
      }
      const std::string why = "a send of " + std::to_string(s.bytes) + " bytes with " +
                              tagText(s.tag) + " to rank " + std::to_string(lane.peer) +
                              " was not taken within " + std::to_string(s.timeout_ms) +
                              " ms (is rank " + std::to_string(lane.peer) + " still running?)";
      if (i == 0 && lane.head_written > 0) {  // half a message cannot be taken back
        close(lane, ErrorKind::kTimeout, why + "; the lane to it is shut");
        return;
      }
      s.work->finish(error(ErrorKind::kTimeout, *s.work, lane.peer, why));
      lane.sends.erase(lane.sends.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // Fails everything pending on `lane` with `kind` and `why`, and shuts it.
  void close(Lane& lane, ErrorKind kind, const std::string& why) {
    if (!lane.open) return;
    lane.open = false;
    lane.closed_kind = kind;
    lane.closed_why = why;
    lane.socket.shutdownBoth();
    lane.socket.close();
    for (auto& s : lane.sends) s->work->finish(error(kind, *s->work, lane.peer, why));
    lane.sends.clear();
    if (lane.in.receive) {
      lane.in.receive->work->finish(error(kind, *lane.in.receive->work, lane.peer, why));
    }
    if (lane.in.buffered) {  // half a message: nobody gets it
      const auto& b = lane.in.buffered;
      if (b->taker) b->taker->work->finish(error(kind, *b->taker->work, lane.peer, why));
      buffered_.remove(b);
    }
    lane.in = Incoming{};
    const bool none = !anyOpen();
    for (auto it = pending_.begin(); it != pending_.end();) {
      const Receive& r = **it;
      if (r.source == lane.peer || (none && r.source == kAnySource)) {
        r.work->finish(error(kind, *r.work, r.source,
                             r.source == lane.peer ? why : "every point-to-point lane is closed"));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Reads what the lane has until it would block.
  void read(Lane& lane) {
    Incoming& in = lane.in;
    for (;;) {
      void* target;
      size_t want;
      if (!in.in_payload) {
        target = in.header + in.header_got;
        want = net::kFrameHeaderBytes - in.header_got;
      } else {
        const size_t left = in.frame.length - in.got;
        switch (in.sink) {
          case Sink::kReceive:
            target = in.receive->data + in.got;
            want = left;
            break;
          case Sink::kBuffer:
            target = in.buffered->bytes.data() + in.got;
            want = left;
            break;
          case Sink::kDiscard:
          default:
            target = discard_.data();
            want = std::min(left, discard_.size());
            break;
        }
      }
      const ssize_t n = ::recv(lane.socket.fd(), target, want, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        close(lane, ErrorKind::kPeerClosed,
              "the point-to-point lane to rank " + std::to_string(lane.peer) + " closed (" +
                  (n == 0 ? std::string("the peer hung up") : std::strerror(errno)) +
                  "; did rank " + std::to_string(lane.peer) + " exit?)");
        return;
      }
      if (!in.in_payload) {
        in.header_got += static_cast<size_t>(n);
        if (in.header_got == net::kFrameHeaderBytes && !startPayload(lane)) return;
      } else {
        in.got += static_cast<size_t>(n);
      }
      if (in.in_payload && in.got == in.frame.length) finishMessage(lane);
    }
  }

  // The header is in: checks it and picks where the payload goes. False when the lane closed.
  bool startPayload(Lane& lane) {
    Incoming& in = lane.in;
    in.frame = net::decodeFrameHeader(in.header);
    const net::FrameHeader& h = in.frame;
    if (h.magic != kPointToPointMagic || h.generation != generation_ ||
        h.sequence != lane.received_seq + 1) {
      close(lane, ErrorKind::kBadFrame,
            "rank " + std::to_string(lane.peer) +
                " sent something other than its next point-to-point message (expected message " +
                std::to_string(lane.received_seq + 1) + " of generation " +
                std::to_string(generation_) + ", got magic " + std::to_string(h.magic) +
                ", generation " + std::to_string(h.generation) + ", message " +
                std::to_string(h.sequence) + ")");
      return false;
    }
    if (h.length > kMaxMessageBytes) {
      close(lane, ErrorKind::kBadFrame,
            "rank " + std::to_string(lane.peer) + " announced a message of " +
                std::to_string(h.length) + " bytes, more than this process can hold");
      return false;
    }
    ++lane.received_seq;
    in.in_payload = true;
    in.got = 0;
    auto match = std::find_if(pending_.begin(), pending_.end(),
                              [&](const auto& r) { return r->takes(lane.peer, h.tag); });
    if (match == pending_.end()) {
      auto b = std::make_shared<Buffered>();
      b->source = lane.peer;
      b->tag = h.tag;
      try {
        b->bytes.resize(h.length);
      } catch (const std::exception&) {  // bad_alloc, length_error: a length no one could send
        close(lane, ErrorKind::kBadFrame,
              "rank " + std::to_string(lane.peer) + " announced a message of " +
                  std::to_string(h.length) + " bytes, more than this process can hold");
        return false;
      }
      buffered_.push_back(b);
      in.buffered = std::move(b);
      in.sink = Sink::kBuffer;
    } else if ((*match)->bytes != h.length) {
      failSize(**match, lane.peer, h.length);
      pending_.erase(match);
      in.sink = Sink::kDiscard;
    } else {
      in.receive = *match;
      pending_.erase(match);
      in.sink = Sink::kReceive;
    }
    if (h.length == 0) finishMessage(lane);
    return true;
  }

  void finishMessage(Lane& lane) {
    Incoming& in = lane.in;
    if (in.sink == Sink::kReceive) {
      in.receive->work->setSource(lane.peer);
      in.receive->work->finish(nullptr);
    } else if (in.sink == Sink::kBuffer) {
      Buffered& b = *in.buffered;
      b.complete = true;
      if (b.taker) {
        deliver(*b.taker, b);
        b.dropped = true;
      }
      if (b.dropped) buffered_.remove(in.buffered);
    }
    in = Incoming{};
  }

  // Writes queued sends until the socket would block.
  void write(Lane& lane) {
    while (!lane.sends.empty()) {
      const Send& s = *lane.sends.front();
      if (lane.head_written == 0) {
        net::FrameHeader h;
        h.magic = kPointToPointMagic;
        h.tag = s.tag;
        h.generation = generation_;
        h.sequence = ++lane.sent_seq;
        h.length = s.bytes;
        net::encodeFrameHeader(h, lane.head_header);
      }
      iovec parts[2];
      int count = 0;
      if (lane.head_written < net::kFrameHeaderBytes) {
        parts[count++] = {lane.head_header + lane.head_written,
                          net::kFrameHeaderBytes - lane.head_written};
        if (s.bytes > 0) parts[count++] = {const_cast<uint8_t*>(s.data), s.bytes};
      } else {
        const size_t done = lane.head_written - net::kFrameHeaderBytes;
        parts[count++] = {const_cast<uint8_t*>(s.data) + done, s.bytes - done};
      }
      msghdr msg{};
      msg.msg_iov = parts;
      msg.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n = ::sendmsg(lane.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0) {
        close(lane, ErrorKind::kPeerClosed,
              "the point-to-point lane to rank " + std::to_string(lane.peer) + " closed (" +
                  std::strerror(errno) + "; did rank " + std::to_string(lane.peer) + " exit?)");
        return;
      }
      lane.head_written += static_cast<size_t>(n);
      if (lane.head_written < net::kFrameHeaderBytes + s.bytes) continue;
      if (bytes_sent_ != nullptr) {
        bytes_sent_->fetch_add(net::kFrameHeaderBytes + s.bytes, std::memory_order_relaxed);
      }
      s.work->finish(nullptr);
      lane.sends.pop_front();
      lane.head_written = 0;
    }
  }

  const int rank_;
  const uint64_t generation_;
  std::atomic<uint64_t>* const bytes_sent_;
  std::vector<std::unique_ptr<Lane>> lanes_;       // [peer]; closed at [rank]
  std::list<std::shared_ptr<Receive>> pending_;    // posted and unmatched, oldest first
  std::list<std::shared_ptr<Buffered>> buffered_;  // arrived (or arriving) unmatched, oldest first
  std::vector<uint8_t> discard_;                   // where dropped payloads are read to
};

PointToPoint::PointToPoint(int rank, int world, uint64_t generation, std::vector<net::Socket> lanes,
                           std::atomic<uint64_t>* bytes_sent)
    : rank_(rank), world_(world) {
  if (static_cast<int>(lanes.size()) != world) {
    throw CommError(ErrorKind::kInvalid, "rendezvous", 0, -1,
                    "point-to-point: " + std::to_string(lanes.size()) + " lanes for a world of " +
                        std::to_string(world));
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    throw CommError(ErrorKind::kInvalid, "rendezvous", 0, -1,
                    std::string("point-to-point: eventfd failed: ") + std::strerror(errno));
  }
  engine_ = std::make_unique<Engine>(rank, generation, std::move(lanes), bytes_sent);
  thread_ = std::thread([this] { loop(); });
}

PointToPoint::~PointToPoint() {
  {
    base::MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake();
  thread_.join();
  ::close(wake_fd_);
}

void PointToPoint::wake() {
  const uint64_t one = 1;
  // Only a full counter (2^64 - 2 unread wake-ups) can refuse this; the loop is awake then anyway.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void PointToPoint::checkPeer(const char* op, int peer, bool any) const {
  if ((any && peer == kAnySource) || (peer >= 0 && peer < world_ && peer != rank_)) return;
  throw CommError(ErrorKind::kInvalid, op, 0, peer,
                  std::string(op) + ": rank " + std::to_string(peer) +
                      (peer == rank_ ? " is this rank itself"
                                     : " is not a rank of a world of " + std::to_string(world_)));
}

std::shared_ptr<Work> PointToPoint::send(int peer, uint32_t tag, const void* data, size_t bytes,
                                         std::chrono::milliseconds timeout) {
  checkPeer("send", peer, false);
  auto s = std::make_shared<Send>();
  s->peer = peer;
  s->tag = tag;
  s->data = static_cast<const uint8_t*>(data);
  s->bytes = bytes;
  s->deadline = Clock::now() + timeout;
  s->timeout_ms = static_cast<long>(timeout.count());
  {
    base::MutexLock lock(mutex_);
    s->work = std::make_shared<Work>("send", next_seq_++);
    if (aborted_) {
      s->work->finish(aborted_);
      return s->work;
    }
    new_sends_.push_back(s);
  }
  wake();
  return s->work;
}

std::shared_ptr<ReceiveWork> PointToPoint::recv(int source, uint32_t tag, void* data, size_t bytes,
                                                std::chrono::milliseconds timeout) {
  checkPeer("recv", source, true);
  auto r = std::make_shared<Receive>();
  r->source = source;
  r->tag = tag;
  r->data = static_cast<uint8_t*>(data);
  r->bytes = bytes;
  r->deadline = Clock::now() + timeout;
  r->timeout_ms = static_cast<long>(timeout.count());
  {
    base::MutexLock lock(mutex_);
    r->work = std::make_shared<ReceiveWork>(next_seq_++, source);
    if (aborted_) {
      r->work->finish(aborted_);
      return r->work;
    }
    new_receives_.push_back(r);
  }
  wake();
  return r->work;
}

void PointToPoint::abort(std::exception_ptr error) {
  {
    base::MutexLock lock(mutex_);
    if (aborted_) return;
    aborted_ = std::move(error);
  }
  wake();
}

namespace {

// The text and kind of an abort's error, for the Works it fails.
std::pair<ErrorKind, std::string> describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const CommError& e) {
    return {e.kind(), std::string("the group is broken by an earlier failure: ") + e.what()};
  } catch (const std::exception& e) {
    return {ErrorKind::kInvalid,
            std::string("the group is broken by an earlier failure: ") + e.what()};
  }
}

}  // namespace

void PointToPoint::loop() {
  bool aborted = false;
  std::vector<pollfd> fds;
  std::vector<int> peers;
  for (;;) {
    std::vector<std::shared_ptr<Send>> sends;
    std::vector<std::shared_ptr<Receive>> receives;
    std::exception_ptr abortError;
    bool stopping;
    {
      base::MutexLock lock(mutex_);
      sends.swap(new_sends_);
      receives.swap(new_receives_);
      abortError = aborted_;
      stopping = stopping_;
    }
    for (auto& s : sends) engine_->addSend(std::move(s));
    for (auto& r : receives) engine_->addReceive(std::move(r));
    if (stopping) {
      engine_->closeAll(ErrorKind::kInvalid, "the group was closed before the operation completed");
      return;
    }
    if (abortError && !aborted) {
      aborted = true;
      const auto [kind, why] = describe(abortError);
      engine_->closeAll(kind, why);
    }
    engine_->expire(Clock::now());

    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    peers.assign(1, -1);
    engine_->pollSet(fds, peers);
    const Deadline next = engine_->nextDeadline();
    const int timeout = next == Deadline::max() ? -1 : net::pollTimeoutMs(next);
    const int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc <= 0) continue;  // a deadline came, or EINTR
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) engine_->onEvents(peers[i], fds[i].revents);
    }
  }
}

}  // namespace cumulus::comm
