#pragma once
// Two-level (hierarchical, "2D from 1D") all-reduce for L ranks on each of H hosts, as Horovod's
// hierarchical all-reduce, built from the ring's passes (ring.h):
//   (a) reduce-scatter inside the host: a ring of the host's L ranks over L even chunks of the
//       whole buffer; local rank j ends owning chunk j, reduced over its host;
//   (b) all-reduce of chunk j across hosts: a ring of the H ranks with local index j (one per
//       host), over H even sub-chunks of chunk j, all 2H−2 steps;
//   (c) all-gather inside the host: the host ring's steps L−1..2L−3, which hand every chunk to
//       every local rank.
// Each byte crosses a host's link 2(H−1)/H times (the flat ring: 2(p−1)/p), and a rank waits on
// 2(L−1) local plus 2(H−1) remote messages instead of 2(HL−1) remote-paced ones.
//
// The sub-rings are Collectives of their own (renumbered ranks, the parent's pairs, operation
// identity and deadline), so frames and errors are the parent's: an error names the global rank
// of the peer. The local and cross rings use disjoint pairs, and passes over one pair run one
// after the other, so their frames cannot mix.
//
// kAvg runs the passes as sums and divides chunk j by the whole world once, after (b). The
// summation order of each element is fixed by (H, L), so results are bit-identical from run to
// run; they may differ in the last bits from the flat ring's. Any count works (0, < p).
//
// Layout: when the hosts hold unequal numbers of ranks (a fleet that lost one), this runs the
// flat ring instead: same answer, no two-level speed-up. H = 1 or L = 1 are the ring over
// the host or over the hosts.
//
// Blocking, throws CommError (see tcp/transfer.h). Not thread-safe (uses the Collective's scratch).

#include "comm/collective.h"
#include "comm/topology.h"
#include "comm/types.h"

namespace cumulus::comm {

// In place: every rank ends with the reduction of all ranks' `buffer`. `topology.world()` must
// equal `c.world`.
void hierarchicalAllreduce(const Collective& c, const Topology& topology, Buffer& buffer,
                           ReduceOp op);

}  // namespace cumulus::comm
