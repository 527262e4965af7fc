#pragma once
// The data-plane engine: one poll() loop that streams a sequence of framed messages ("units") to
// one peer while it receives another sequence from a peer (possibly the same connection), so a
// ring step sends right while it receives from the left at full duplex.
//
// - Inline units (TCP, AF_UNIX, and small payloads on shared memory) are sent with one sendmsg()
//   of {header, user memory} and received with one recvmsg() into {header, destination} (user
//   memory or a scratch segment, as the algorithm chooses).
// - On a pair with a shared-memory channel (comm/shm/channel.h) a payload the channel carries is
//   copied once into the next free slot and only its header goes on the socket; the receiver
//   validates the header, then hands the slot to `recv_in_place(i, data)` (e.g. reduce from it
//   straight into user memory) or, without one, copies it to recv_span(i) and runs on_received(i).
//   A sender waiting for a free slot sleeps in poll() on the channel's eventfd and the socket.
// - Waiting: with a SpinGovernor whose budget is > 0 and a shared-memory channel, a wait first
//   spins on the channel's shared counters (the peer announced a frame / freed a slot), then
//   sleeps in poll(). A reply in a round trip between two awake cores comes back in a few µs,
//   while a sleep and wake-up through the scheduler (on a VM, a halted vCPU) costs more than that.
//   Spinning on poll(…, 0) instead was measured 10-200× slower than sleeping on the development
//   VM, so sockets without a channel never spin.
// - Every unit's header is checked against what must come next (magic, generation, op sequence,
//   tag = unit index, exact length); anything else raises CommError(kBadFrame).
// - The loop ends by the op's deadline: CommError(kTimeout) naming the peer being waited on.
//   A closed or reset connection raises kPeerClosed naming that peer.
//
// Blocking: runs on the caller's thread until all units are sent and received, or throws.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "comm/net/pair.h"
#include "comm/net/socket.h"

namespace cumulus::comm::net {

// Adapts busy-waiting to the host. A spin pays when the peer answers within the budget (idle
// cores: a wake-up from poll() on a halted vCPU costs 10+ µs, the answer comes in a few); when it
// does not (ranks plus other work outnumber the cores), it only kept the peer off the core it
// needed: measured on the 2-core VM under a parallel build, a 50 µs spin turned an 8 µs 4 KiB ring
// all-reduce into 70-125 µs. So the governor keeps a moving average of how often a spin ran out
// (weight 1/8 per spin) and spins only while that stays under 1/8, probing once every
// kSpinProbeEvery waits otherwise to notice that the host has calmed down. Owned by the
// communicator, used by its executing thread only.
constexpr unsigned kSpinProbeEvery = 64;
struct SpinGovernor {
  int budget_us = 0;       // 0: never spin
  double miss_rate = 0.0;  // moving average of spins that ran out
  unsigned waits = 0;

  bool shouldSpin() {
    return budget_us > 0 && (miss_rate < 0.125 || ++waits % kSpinProbeEvery == 0);
  }
  void record(bool missed) { miss_rate += ((missed ? 1.0 : 0.0) - miss_rate) / 8; }
};

// What identifies an operation in frames and errors.
struct OpContext {
  const char* op = "";
  uint64_t seq = 0;
  uint64_t generation = 0;
  Deadline deadline;
  long timeout_ms = 0;           // for messages only
  SpinGovernor* spin = nullptr;  // null: never spin
  // Called each time the operation goes to sleep for a free shared-memory slot; may be null.
  const std::function<void()>* on_slot_wait = nullptr;
  // Counts what this rank hands to its transport: each unit's 32-byte header and its payload,
  // whether the payload went on the socket or into a shared-memory slot, added (relaxed) once the
  // whole unit is handed over. Empty units never touch the wire and count nothing. May be null.
  std::atomic<uint64_t>* bytes_sent = nullptr;
  // What the payloads hold: 0 for raw bytes, else comm::DType + 1 (comm/types.h). It travels in
  // the top byte of every frame's tag (the unit index is the low 24 bits), so a rank that sends
  // int32 where float32 is due fails kBadFrame naming both, even when the byte counts agree.
  uint8_t element = 0;
};

// The element code of a frame tag, and the tag of unit `index` of an operation with `element`.
constexpr uint32_t kTagIndexBits = 24;
inline uint32_t frameTag(uint8_t element, size_t index) {
  return static_cast<uint32_t>(element) << kTagIndexBits |
         (static_cast<uint32_t>(index) & ((1u << kTagIndexBits) - 1));
}

struct Span {
  void* data = nullptr;
  size_t bytes = 0;
};

struct Transfer {
  Pair* send_to = nullptr;  // null: nothing to send
  size_t send_units = 0;
  std::function<Span(size_t)> send_span;
  std::function<size_t(size_t)> send_after_recvs;  // null: never gated

  Pair* recv_from = nullptr;  // null: nothing to receive
  size_t recv_units = 0;
  std::function<Span(size_t)> recv_span;
  std::function<void(size_t)> on_received;  // null: nothing to do
  // Consumes a unit that arrived in a shared-memory slot (`data`, recv_span(i).bytes long) where it
  // lies, instead of copying it to recv_span(i) and calling on_received(i). Null: copy, then
  // on_received. `data` is valid only during the call.
  std::function<void(size_t, const void*)> recv_in_place;
};

void runTransfer(const OpContext& ctx, const Transfer& transfer);

}  // namespace cumulus::comm::net
