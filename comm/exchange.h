#pragma once
// The collectives that only move bytes between a root and the others, or between every pair:
// gather, scatter and all-to-all. Nothing is reduced, so they take raw bytes of any dtype.
//
// Gather and scatter are direct: each rank exchanges its block with the root alone. The root's
// link carries (p−1)·n bytes, which no gather or scatter can beat, and the others' n each (an
// all-gather of which the root keeps everything carries (p−1)·n on every link). A binomial tree
// would save latency at large p by carrying more bytes through the middle ranks; at the world
// sizes of this project (≤ 16) the root's own link is the bound either way.
//
// All-to-all is the pairwise exchange: in step k = 1 … p−1 rank r sends its block for r+k while
// it receives the block from r−k, at full duplex, so every step keeps every link busy both ways
// and no rank waits for a busy one. Each block is preceded by its length, so split sizes that two
// ranks disagree on fail at once (kInvalid, naming both ranks and both sizes) instead of waiting
// out the timeout, even when one side expects nothing.
//
// Blocking, throws CommError (see tcp/transfer.h). Not thread-safe (uses the Collective).

#include <cstddef>
#include <vector>

#include "comm/collective.h"

namespace cumulus::comm {

// The root's `output` (world × bytes) gets rank r's `input` (bytes) at block r; others pass a
// null output.
void directGather(const Collective& c, const void* input, size_t bytes, void* output, int root);
// Rank r's `output` (bytes) gets block r of the root's `input` (world × bytes); others pass a
// null input.
void directScatter(const Collective& c, const void* input, void* output, size_t bytes, int root);
// Rank r sends input block j (send_bytes[j] bytes; the blocks lie in rank order, back to back) to
// rank j, and receives rank j's block for r into output block j (recv_bytes[j]). Both vectors hold
// world entries; rank r's own block is copied.
void pairwiseAllToAll(const Collective& c, const void* input, const std::vector<size_t>& send_bytes,
                      void* output, const std::vector<size_t>& recv_bytes);

}  // namespace cumulus::comm
