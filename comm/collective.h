#pragma once
// What a collective algorithm runs on: this rank's place in the group, a connection to every
// peer, the operation's identity and deadline, and reusable scratch memory. The communicator
// builds one per operation; the algorithms (ring.h, tree.h) only move and reduce bytes.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/net/pair.h"
#include "comm/net/transfer.h"

namespace cumulus::comm {

// Default pipeline segment: large enough that per-message costs (a header, a syscall, a poll
// wake-up) vanish against the copy, small enough that a received segment is still in L2 when it
// is reduced and that the next one is already in flight. Measured: see comm/ring.h.
constexpr size_t kDefaultSegmentBytes = 512 * 1024;

struct Collective {
  int rank = 0;
  int world = 1;
  std::vector<net::Pair*> pairs;  // pairs[peer]; null at [rank]
  net::OpContext op;
  size_t segment_bytes = kDefaultSegmentBytes;
  std::vector<uint8_t>* scratch = nullptr;  // grown on demand, reused across operations

  net::Pair* peer(int r) const { return pairs[static_cast<size_t>(r)]; }
  int mod(int r) const { return ((r % world) + world) % world; }
  uint8_t* scratchBytes(size_t bytes) const {
    if (scratch->size() < bytes) scratch->resize(bytes);
    return scratch->data();
  }
};

}  // namespace cumulus::comm
