#pragma once
// The data-plane engine: one poll() loop that streams a sequence of framed messages ("units") to
// one peer while it receives another sequence from a peer (possibly the same connection), so a
// ring step sends right while it receives from the left at full duplex.
//
// - Zero copies on the wire path: a unit is sent with one sendmsg() of {header, user memory} and
//   received with one recvmsg() into {header, destination} (the destination is user memory or a
//   scratch segment, as the algorithm chooses).
// - Units of zero bytes are skipped by both ends (both know the lengths), so empty chunks cost
//   nothing.
// - Pipelining: send unit i may wait until `sendAfterRecvs(i)` units have been received and
//   handled; `onReceived(i)` runs (e.g. a reduction) as soon as unit i is complete, while the
//   kernel keeps both sockets' buffers moving.
// - Every unit's header is checked against what must come next (magic, generation, op sequence,
//   tag = unit index, exact length); anything else raises CommError(kBadFrame).
// - The loop ends by the op's deadline: CommError(kTimeout) naming the peer being waited on.
//   A closed or reset connection raises kPeerClosed naming that peer.
//
// Blocking: runs on the caller's thread until all units are sent and received, or throws.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "comm/tcp/pair.h"
#include "comm/tcp/socket.h"

namespace cumulus::comm::tcp {

// What identifies an operation in frames and errors.
struct OpContext {
  const char* op = "";
  uint64_t seq = 0;
  uint64_t generation = 0;
  Deadline deadline;
  long timeoutMs = 0;  // for messages only
};

struct Span {
  void* data = nullptr;
  size_t bytes = 0;
};

struct Transfer {
  Pair* sendTo = nullptr;  // null: nothing to send
  size_t sendUnits = 0;
  std::function<Span(size_t)> sendSpan;
  std::function<size_t(size_t)> sendAfterRecvs;  // null: never gated

  Pair* recvFrom = nullptr;  // null: nothing to receive
  size_t recvUnits = 0;
  std::function<Span(size_t)> recvSpan;
  std::function<void(size_t)> onReceived;  // null: nothing to do
};

void runTransfer(const OpContext& ctx, const Transfer& transfer);

}  // namespace cumulus::comm::tcp
