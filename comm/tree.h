#pragma once
// Binomial-tree (minimum spanning tree) collectives: reduce to a root in ⌈log₂p⌉ rounds, and
// broadcast from a root in ⌈log₂p⌉ rounds. Latency-optimal, so the pick for small buffers; an
// all-reduce is a reduce to rank 0 followed by a broadcast from rank 0.
//
// Ranks are renumbered relative to the root (v = rank − root mod p). In reduce round k a rank
// with bit k set sends its partial result to v − 2^k and stops; the others fold in v + 2^k. The
// order of folding is fixed by p and root, so results are bit-identical from run to run.
// Any p works (missing partners are skipped). Buffers travel in Collective::segment_bytes
// segments, so a rank forwards segment j while it still receives j+1.
//
// Blocking, throws CommError (see tcp/transfer.h). Not thread-safe (uses the scratch).

#include "comm/collective.h"
#include "comm/types.h"

namespace cumulus::comm {

// After the call the root's `buffer` holds the reduction (kAvg: divided by p); the other ranks'
// buffers hold partial results (unspecified).
void treeReduce(const Collective& c, Buffer& buffer, ReduceOp op, int root);
// After the call every rank's `buffer` equals the root's.
void treeBroadcast(const Collective& c, Buffer& buffer, int root);
void treeAllreduce(const Collective& c, Buffer& buffer, ReduceOp op);

}  // namespace cumulus::comm
