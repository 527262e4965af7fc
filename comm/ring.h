#pragma once
// Ring all-reduce (as gloo/allreduce_ring.h): a reduce-scatter, then an all-gather, each p−1
// steps around the ring; every byte crosses each link 2(p−1)/p times, which is bandwidth-optimal.
// Also the building block of reduce-scatter and all-gather.
//
// Chunks: the buffer is cut into p chunks (sizes differ by at most one element; empty chunks
// are fine, so any count works, including 0 and count < p). After the reduce-scatter rank r holds
// the fully reduced chunk r. The summation order of each element is fixed by (p, rank layout),
// so results are bit-identical from run to run.
//
// Segments: each chunk is sent as segments of Collective::segment_bytes. 512 KiB is the default
// because it cost the least CPU per 64 MiB float32 all-reduce on the 2-core development VM
// (tests/comm/comm_perf, all ranks' CPU per op, p=2 / p=4): 64 KiB 45.9 / 157 ms,
// 256 KiB 42.8 / 134 ms, 512 KiB 42.2 / 134 ms, 1 MiB 44.6 / 136 ms, 2 MiB 47.2 / 133 ms.
// Smaller segments pay more headers, syscalls and wake-ups; larger ones fall out of L2 between
// landing and reduction. A chunk is nevertheless cut into at least kMinSegmentsPerChunk segments
// (never below kMinSegmentBytes), because with one or two segments per step the ring cannot
// pipeline and half the ranks wait: at 4 MiB, p=4 the ring used ~5.5 ms of CPU but took 5.4 ms
// of wall time with 512 KiB segments; with 256 KiB it took 2.7-4.7 ms (shared, noisy VM).
//
// Blocking, throws CommError (see transfer.h). Not thread-safe (uses the Collective's scratch).

#include <cstddef>
#include <vector>

#include "comm/collective.h"
#include "comm/types.h"

namespace cumulus::comm {

// A run of ring steps [firstStep, lastStep) over `chunks` (element offset and count of chunk c
// at [c]) of the buffer at `base`. Steps 0..p−2 are the reduce-scatter (received segments are
// reduced with `op`; kAvg divides the owned chunk by p at its last step); steps p−1..2p−3 the
// all-gather (received segments land straight in place).
constexpr size_t kMinSegmentsPerChunk = 4;
constexpr size_t kMinSegmentBytes = 64 * 1024;

class RingPass {
 public:
  struct Chunk {
    size_t offset = 0;
    size_t count = 0;
  };
  RingPass(const Collective& c, void* base, DType dtype, ReduceOp op, std::vector<Chunk> chunks,
           int firstStep, int lastStep);
  void run();

 private:
  void* segment(int chunk, size_t segmentIndex, size_t* bytes) const;

  const Collective& c_;
  char* base_;
  DType dtype_;
  ReduceOp op_;
  std::vector<Chunk> chunks_;
  int first_step_, last_step_;
  size_t elem_size_, seg_elems_, segs_per_step_;
};

// Splits `count` elements into `parts` chunks whose sizes differ by at most one.
std::vector<RingPass::Chunk> evenChunks(size_t count, int parts);

// In place: every rank ends with the reduction of all ranks' `buffer`.
void ringAllreduce(const Collective& c, Buffer& buffer, ReduceOp op);
// input.count == p * output.count; rank r receives the reduction of block r. `input` is left
// untouched (the pass runs on a scratch copy).
void ringReduceScatter(const Collective& c, const Buffer& input, Buffer& output, ReduceOp op);
// output.count == p * input.count; block r of the output is rank r's input.
void ringAllgather(const Collective& c, const Buffer& input, Buffer& output);

}  // namespace cumulus::comm
