#pragma once
// Shared-memory data plane between two ranks on one host (as NCCL's SHM transport): one copy per
// large message instead of AF_UNIX's two, and the receiver reduces straight from the sender's
// slot.
//
// A Channel belongs to one Pair (comm/net/pair.h) and rides on its AF_UNIX socket:
//   - The connector creates one memfd holding two rings of slots (connector→acceptor and
//     acceptor→connector) and two eventfds (one per ring: "a slot was freed"), and passes the
//     three descriptors to the acceptor with SCM_RIGHTS right after the handshake (offer()); the
//     acceptor maps them and acknowledges (accept()). The memfd has no name, so nothing is left
//     behind by a crash, and only the two processes holding the descriptors can map it.
//   - A large payload goes into the next free slot of the outgoing ring; the 32-byte frame header
//     still goes on the socket (magic kShmFrameMagic instead of kFrameMagic). The socket stays the
//     doorbell (the receiver sleeps in poll() on it), the validator (magic, generation, sequence,
//     tag, length are checked as for inline frames, and each slot carries a stamp of the frame it
//     belongs to) and the liveness channel (a SIGKILLed peer still closes it: EOF).
//   - The receiver consumes the payload in place (the ring's reduce-scatter reduces from the slot
//     into the user's buffer), then releases the slot: an atomic counter in the segment. Only a
//     producer that found every slot full and went to sleep is woken, through the ring's eventfd;
//     it sleeps in poll() on that eventfd and the socket (POLLRDHUP), so a dead peer and the
//     operation's deadline still end the wait.
//   - Slots are used strictly in order on both ends, so the slot of a message is implicit.
//
// Which payloads go through a slot is decided by carries(bytes) from the length alone, so both
// ends agree without a word; everything else (small messages: the latency path) stays inline on
// the socket.
//
// Thread-safety: one producer thread and one consumer thread per ring (the communicator's executing
// thread on each end). offer()/accept() block until done or the deadline; nothing else blocks.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/fd.h"
#include "comm/error.h"
#include "comm/net/socket.h"

namespace cumulus::comm::shm {

// Payloads of at least kMinShmBytes and at most the slot size travel through a slot. Below that
// the copy saved is worth less than the slot's bookkeeping, and inline frames keep the small-
// message path to one sendmsg/recvmsg pair.
constexpr size_t kMinShmBytes = 16 * 1024;
constexpr size_t kDefaultSlotBytes = 512 * 1024;  // the ring's segment (comm/collective.h)
constexpr uint32_t kDefaultSlots = 4;
constexpr size_t kMaxSlotBytes = 8 << 20;

// The slot size for a pipeline segment of `segment_bytes`: the segment rounded up to a page, at
// least kDefaultSlotBytes (so reduce-scatter segments of any chunk size fit) and at most
// kMaxSlotBytes (larger segments travel inline).
size_t slotBytesFor(size_t segment_bytes);

class Channel {
 public:
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Connector side: creates the segment and passes it to the peer over `socket` (after the
  // handshake), then waits for the acknowledgement. When the segment cannot be created (no memfd
  // in this sandbox, no memory): throws if `required` (CUMULUS_TRANSPORT=shm), else declines the
  // offer and returns null, and the pair carries everything on the socket. Throws CommError
  // (op "rendezvous", seq 0, `peer`): kRendezvous when the segment cannot be created and is
  // required or the peer refuses it, kTimeout / kPeerClosed from the socket.
  static std::unique_ptr<Channel> offer(net::Socket& socket, int peer, net::Deadline deadline,
                                        bool required, uint32_t slots = kDefaultSlots,
                                        size_t slotBytes = kDefaultSlotBytes);
  // Sends the "no segment" offer and waits for the acknowledgement (what offer() does when it
  // cannot create one). Throws like offer().
  static void decline(net::Socket& socket, int peer, net::Deadline deadline);
  // Acceptor side: receives and maps the segment, acknowledges. Returns the channel, or null when
  // the peer declined (the pair stays a plain socket). Fails (comm/error.h, rule 2: the caller
  // drops the connection and keeps waiting) with kTimeout when no offer arrived before the
  // deadline, kBadFrame for an offer that is not valid, kRendezvous when the segment cannot be
  // mapped.
  static Result<std::unique_ptr<Channel>> accept(net::Socket& socket, net::Deadline deadline);

  size_t slotBytes() const { return slot_bytes_; }
  uint32_t slots() const { return slots_; }
  bool carries(size_t bytes) const { return bytes >= kMinShmBytes && bytes <= slot_bytes_; }

  // Producer (outgoing ring). acquire() returns the next free slot, or null while every slot is
  // in use. commit() stamps it with the frame it belongs to and hands it over (the frame header on
  // the socket is what tells the peer).
  void* acquire();
  void commit(uint64_t seq, uint32_t tag, uint64_t bytes);
  // Before sleeping for a slot: arms the wake-up and returns false if a slot became free
  // meanwhile (do not sleep then). The fd to poll for POLLIN is creditFd(); after waking, call
  // drainCredits().
  bool armCreditWait();
  int creditFd() const { return out_credit_fd_; }
  void drainCredits();

  // Busy-wait support (tcp/transfer.h): polling a syscall in a loop is slow on the VMs this runs
  // on, polling a shared cache line is not. announce() counts every frame we finished writing on
  // the socket (inline or not); a receiver spins until peerAnnounced() moves, then reads the
  // socket. slotFree() is acquire() without taking the slot.
  void announce() { ++announced_, outAnnounced()->store(announced_, std::memory_order_release); }
  uint64_t peerAnnounced() const;
  bool slotFree() const;

  // Consumer (incoming ring): the next slot's payload; kBadFrame when its stamp does not name this
  // frame (a peer out of step). release() frees it for the producer.
  Result<const void*> front(uint64_t seq, uint32_t tag, uint64_t bytes) const;
  void release();

 private:
  struct RingControl;
  struct Ring {
    RingControl* control = nullptr;
    uint8_t* slots = nullptr;
  };
  Channel(uint8_t* base, size_t mapped, uint32_t slots, size_t slotBytes, bool connector,
          int creditFd0, int creditFd1);
  static size_t ringBytes(uint32_t slots, size_t slotBytes);
  // The connector's segment and eventfds, and the memfd to pass on; kRendezvous when the host
  // will not give them.
  struct Segment {
    std::unique_ptr<Channel> channel;
    base::Fd memfd;
  };
  static Result<Segment> create(uint32_t slots, size_t slotBytes);
  // Sends the offer message (`fds` attached when non-null) and waits for the answer.
  static void sendOffer(net::Socket& socket, int peer, net::Deadline deadline, uint32_t slots,
                        size_t slotBytes, const int* fds);

  uint8_t* base_;
  size_t mapped_;
  uint32_t slots_;
  size_t slot_bytes_;
  Ring out_, in_;
  int out_credit_fd_ = -1;  // we poll it when our outgoing ring is full
  int in_credit_fd_ = -1;   // we write it when we free a slot the peer waits for
  std::atomic<uint64_t>* outAnnounced() const;
  uint64_t produced_ = 0;
  uint64_t consumed_ = 0;
  uint64_t announced_ = 0;
};

}  // namespace cumulus::comm::shm
