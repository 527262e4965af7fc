#include "comm/shm/channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

#include "base/fd.h"
#include "comm/error.h"
#include "comm/net/frame.h"

namespace cumulus::comm::shm {

// One ring's shared control block. Each field sits on its own cache line: the consumer writes
// `consumed`, the producer writes `producer_waiting` and `announced`, and a spinning reader of one
// should not bounce the line the other writes on every message.
struct Channel::RingControl {
  alignas(64) std::atomic<uint64_t> consumed;
  alignas(64) std::atomic<uint32_t> producer_waiting;
  alignas(64) std::atomic<uint64_t> announced;  // frames the producer finished writing
};

namespace {

using base::Fd;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

constexpr uint32_t kOfferMagic = 0x4d4c4d43;  // "CMLM"
constexpr uint32_t kOfferVersion = 1;
constexpr size_t kOfferBytes = 24;
constexpr size_t kAckBytes = 8;
constexpr size_t kPage = 4096;
constexpr uint32_t kMaxSlots = 64;

// Written by the producer before the frame header leaves, checked by the consumer after it
// arrived: the slot really holds the frame the header announces.
struct Stamp {
  uint64_t seq;
  uint64_t bytes;
  uint32_t tag;
  uint32_t pad;
};

size_t alignUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
constexpr size_t kControlBytes = 192;  // sizeof(RingControl), checked in ringBytes()
size_t headBytes(uint32_t slots) { return alignUp(kControlBytes + slots * sizeof(Stamp), kPage); }

Stamp* stamps(void* control) {
  return reinterpret_cast<Stamp*>(static_cast<uint8_t*>(control) + kControlBytes);
}

[[noreturn]] void setupFailed(int peer, const std::string& what) {
  throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, peer,
                  "shared-memory transport to rank " + std::to_string(peer) + ": " + what +
                      " (CUMULUS_TRANSPORT=unix avoids shared memory)");
}

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Waits for `events` on `fd` until the deadline; false on timeout.
bool waitFor(int fd, short events, net::Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, net::pollTimeoutMs(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;
  }
}

uint8_t* mapShared(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace

size_t slotBytesFor(size_t segment_bytes) {
  return std::min(kMaxSlotBytes, std::max(kDefaultSlotBytes, alignUp(segment_bytes, kPage)));
}

size_t Channel::ringBytes(uint32_t slots, size_t slotBytes) {
  static_assert(sizeof(RingControl) == kControlBytes, "stamps follow the control block");
  return headBytes(slots) + static_cast<size_t>(slots) * slotBytes;
}

Channel::Channel(uint8_t* base, size_t mapped, uint32_t slots, size_t slotBytes, bool connector,
                 int creditFd0, int creditFd1)
    : base_(base), mapped_(mapped), slots_(slots), slot_bytes_(slotBytes) {
  const size_t ring = ringBytes(slots, slotBytes);
  Ring rings[2];
  for (int i = 0; i < 2; ++i) {
    uint8_t* start = base + static_cast<size_t>(i) * ring;
    rings[i].control = reinterpret_cast<RingControl*>(start);
    rings[i].slots = start + headBytes(slots);
  }
  // Ring 0 carries connector → acceptor, ring 1 the other way; eventfd i says "a slot of ring i
  // was freed" and is polled by ring i's producer.
  out_ = connector ? rings[0] : rings[1];
  in_ = connector ? rings[1] : rings[0];
  out_credit_fd_ = connector ? creditFd0 : creditFd1;
  in_credit_fd_ = connector ? creditFd1 : creditFd0;
}

Channel::~Channel() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
  if (out_credit_fd_ >= 0) ::close(out_credit_fd_);
  if (in_credit_fd_ >= 0) ::close(in_credit_fd_);
}

Result<Channel::Segment> Channel::create(uint32_t slots, size_t slotBytes) {
  assert(slots > 0 && slots <= kMaxSlots && slotBytes % 64 == 0 && slotBytes <= kMaxSlotBytes);
  auto failed = [](const char* what) { return Status(ErrorKind::kRendezvous, errnoText(what)); };
  const size_t total = 2 * ringBytes(slots, slotBytes);
  Segment segment;
  segment.memfd.reset(::memfd_create("cumulus-shm", MFD_CLOEXEC));
  if (segment.memfd.get() < 0) return failed("memfd_create");
  if (::ftruncate(segment.memfd.get(), static_cast<off_t>(total)) != 0) return failed("ftruncate");
  Fd credit0(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  Fd credit1(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (credit0.get() < 0 || credit1.get() < 0) return failed("eventfd");
  uint8_t* base = mapShared(segment.memfd.get(), total);
  if (base == nullptr) return failed("mmap");
  // The memfd starts zeroed: both rings' counters are 0 and no producer waits.
  segment.channel.reset(
      new Channel(base, total, slots, slotBytes, true, credit0.release(), credit1.release()));
  return segment;
}

void Channel::sendOffer(net::Socket& socket, int peer, net::Deadline deadline, uint32_t slots,
                        size_t slotBytes, const int* fds) {
  uint8_t msg[kOfferBytes] = {0};
  net::storeLe32(msg, kOfferMagic);
  net::storeLe32(msg + 4, kOfferVersion);
  net::storeLe32(msg + 8, slots);
  net::storeLe64(msg + 16, slotBytes);
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  iovec iov{msg, sizeof msg};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (fds != nullptr) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(3 * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds, 3 * sizeof(int));
  }
  for (;;) {
    ssize_t rc = ::sendmsg(socket.fd(), &mh, MSG_NOSIGNAL);
    if (rc == static_cast<ssize_t>(sizeof msg)) break;
    if (rc >= 0) setupFailed(peer, "the offer was cut short");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw CommError(ErrorKind::kPeerClosed, "rendezvous", 0, peer,
                      errnoText("sending the shared-memory offer"));
    }
    if (!waitFor(socket.fd(), POLLOUT, deadline)) {
      throw CommError(ErrorKind::kTimeout, "rendezvous", 0, peer,
                      "sending the shared-memory offer timed out");
    }
  }
  uint8_t ack[kAckBytes];
  const Status st = socket.readFull(ack, sizeof ack, deadline);
  if (!st.ok()) st.raise("rendezvous", 0, peer, "waiting for the shared-memory answer");
  if (net::loadLe32(ack) != kOfferMagic || net::loadLe32(ack + 4) != 0) {
    setupFailed(peer, "the peer could not map the segment");
  }
}

std::unique_ptr<Channel> Channel::offer(net::Socket& socket, int peer, net::Deadline deadline,
                                        bool required, uint32_t slots, size_t slotBytes) {
  Result<Segment> created = create(slots, slotBytes);
  if (!created.ok()) {
    if (required) setupFailed(peer, created.status().detail());
    decline(socket, peer, deadline);
    return nullptr;
  }
  // The peer gets its own descriptor of the memfd; the mapping outlives ours (closed on return).
  Segment& segment = created.value();
  const int fds[3] = {segment.memfd.get(), segment.channel->out_credit_fd_,
                      segment.channel->in_credit_fd_};
  sendOffer(socket, peer, deadline, slots, slotBytes, fds);
  return std::move(segment.channel);
}

void Channel::decline(net::Socket& socket, int peer, net::Deadline deadline) {
  sendOffer(socket, peer, deadline, 0, 0, nullptr);
}

Result<std::unique_ptr<Channel>> Channel::accept(net::Socket& socket, net::Deadline deadline) {
  uint8_t msg[kOfferBytes];
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  iovec iov{msg, sizeof msg};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t rc = -1;
  for (;;) {
    rc = ::recvmsg(socket.fd(), &mh, MSG_CMSG_CLOEXEC);
    if (rc >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    if (!waitFor(socket.fd(), POLLIN, deadline)) {
      return Status(ErrorKind::kTimeout, "no shared-memory offer arrived before the deadline");
    }
  }
  // Take ownership of whatever descriptors came, before any check can return.
  Fd fds[3];
  int received = 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const int n = static_cast<int>((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      if (received < 3) {
        fds[received++].reset(fd);
      } else {
        ::close(fd);
      }
    }
  }
  // A failed answer is not checked: the peer is gone then, and the pair's first transfer (or,
  // for a refusal, the peer's own offer()) reports it, naming the rank.
  auto answer = [&](uint32_t status) {
    uint8_t ack[kAckBytes];
    net::storeLe32(ack, kOfferMagic);
    net::storeLe32(ack + 4, status);
    static_cast<void>(socket.writeFull(ack, sizeof ack, deadline));
  };
  auto refuse = [&](ErrorKind kind, std::string detail) {
    answer(1);
    return Status(kind, std::move(detail));
  };
  if (rc != static_cast<ssize_t>(sizeof msg) || net::loadLe32(msg) != kOfferMagic ||
      net::loadLe32(msg + 4) != kOfferVersion || (received != 3 && received != 0) ||
      (mh.msg_flags & MSG_CTRUNC) != 0) {
    return refuse(ErrorKind::kBadFrame, "a same-host peer sent no valid shared-memory offer");
  }
  const uint32_t slots = net::loadLe32(msg + 8);
  const uint64_t slotBytes = net::loadLe64(msg + 16);
  if (slots == 0 && slotBytes == 0 && received == 0) {  // decline(): stay a plain socket
    answer(0);
    return std::unique_ptr<Channel>();
  }
  if (received != 3 || slots == 0 || slots > kMaxSlots || slotBytes % 64 != 0 || slotBytes == 0 ||
      slotBytes > kMaxSlotBytes) {
    return refuse(ErrorKind::kBadFrame, "a shared-memory offer with a bad geometry");
  }
  const size_t total = 2 * ringBytes(slots, slotBytes);
  struct stat st {};
  if (::fstat(fds[0].get(), &st) != 0 || static_cast<size_t>(st.st_size) != total) {
    return refuse(ErrorKind::kBadFrame, "the offered shared-memory segment has the wrong size");
  }
  uint8_t* base = mapShared(fds[0].get(), total);
  if (base == nullptr)
    return refuse(ErrorKind::kRendezvous, errnoText("mmap of the offered segment"));
  std::unique_ptr<Channel> channel(
      new Channel(base, total, slots, slotBytes, false, fds[1].release(), fds[2].release()));
  answer(0);
  return channel;
}

std::atomic<uint64_t>* Channel::outAnnounced() const { return &out_.control->announced; }

uint64_t Channel::peerAnnounced() const {
  return in_.control->announced.load(std::memory_order_acquire);
}

bool Channel::slotFree() const {
  return produced_ - out_.control->consumed.load(std::memory_order_acquire) < slots_;
}

void* Channel::acquire() {
  const uint64_t consumed = out_.control->consumed.load(std::memory_order_acquire);
  if (produced_ - consumed >= slots_) return nullptr;
  return out_.slots + (produced_ % slots_) * slot_bytes_;
}

void Channel::commit(uint64_t seq, uint32_t tag, uint64_t bytes) {
  Stamp& s = stamps(out_.control)[produced_ % slots_];
  s.seq = seq;
  s.bytes = bytes;
  s.tag = tag;
  ++produced_;
  // The header that announces this slot goes out by a syscall after this; the consumer reads the
  // slot after its own syscall received the header: the kernel orders the two.
  std::atomic_thread_fence(std::memory_order_release);
}

bool Channel::armCreditWait() {
  // Dekker-style with release(): we publish "waiting" then re-read the counter; the consumer
  // publishes the counter then reads "waiting". Sequentially consistent on both sides, so at
  // least one of us sees the other's store and no wake-up is lost.
  out_.control->producer_waiting.store(1, std::memory_order_seq_cst);
  if (produced_ - out_.control->consumed.load(std::memory_order_seq_cst) < slots_) {
    out_.control->producer_waiting.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void Channel::drainCredits() {
  uint64_t value;
  while (::read(out_credit_fd_, &value, sizeof value) == static_cast<ssize_t>(sizeof value)) {
  }
}

Result<const void*> Channel::front(uint64_t seq, uint32_t tag, uint64_t bytes) const {
  std::atomic_thread_fence(std::memory_order_acquire);
  const Stamp& s = stamps(in_.control)[consumed_ % slots_];
  if (s.seq != seq || s.tag != tag || s.bytes != bytes) {
    return Status(ErrorKind::kBadFrame, "shared-memory slot " + std::to_string(consumed_ % slots_) +
                                            " holds sequence " + std::to_string(s.seq) + " tag " +
                                            std::to_string(s.tag) + " (" + std::to_string(s.bytes) +
                                            " bytes), not the announced frame");
  }
  return in_.slots + (consumed_ % slots_) * slot_bytes_;
}

void Channel::release() {
  ++consumed_;
  in_.control->consumed.store(consumed_, std::memory_order_seq_cst);
  if (in_.control->producer_waiting.load(std::memory_order_seq_cst) != 0 &&
      in_.control->producer_waiting.exchange(0, std::memory_order_seq_cst) != 0) {
    const uint64_t one = 1;
    // Cannot fail short of a closed descriptor; a lost wake-up would only cost the peer its
    // deadline, which then names us.
    [[maybe_unused]] ssize_t rc = ::write(in_credit_fd_, &one, sizeof one);
  }
}

}  // namespace cumulus::comm::shm
