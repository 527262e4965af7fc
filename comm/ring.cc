#include "comm/ring.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "comm/error.h"
#include "comm/reduce.h"

namespace cumulus::comm {

std::vector<RingPass::Chunk> evenChunks(size_t count, int parts) {
  std::vector<RingPass::Chunk> chunks(static_cast<size_t>(parts));
  const size_t base = count / static_cast<size_t>(parts);
  const size_t extra = count % static_cast<size_t>(parts);
  size_t offset = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    chunks[c] = {offset, base + (c < extra ? 1 : 0)};
    offset += chunks[c].count;
  }
  return chunks;
}

RingPass::RingPass(const Collective& c, void* base, DType dtype, ReduceOp op,
                   std::vector<Chunk> chunks, int firstStep, int lastStep)
    : c_(c),
      base_(static_cast<char*>(base)),
      dtype_(dtype),
      op_(op),
      chunks_(std::move(chunks)),
      first_step_(firstStep),
      last_step_(lastStep),
      elem_size_(elementSize(dtype)) {
  size_t largest = 0;
  for (const Chunk& chunk : chunks_) largest = std::max(largest, chunk.count);
  // At least kMinSegmentsPerChunk segments per chunk (down to kMinSegmentBytes), so that mid-size
  // buffers pipeline too; at most the configured segment.
  const size_t wanted = std::max(kMinSegmentBytes, largest * elem_size_ / kMinSegmentsPerChunk);
  seg_elems_ = std::max<size_t>(1, std::min(c.segment_bytes, wanted) / elem_size_);
  segs_per_step_ = (largest + seg_elems_ - 1) / seg_elems_;
}

void* RingPass::segment(int chunk, size_t segmentIndex, size_t* bytes) const {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const size_t begin = std::min(ch.count, segmentIndex * seg_elems_);
  const size_t end = std::min(ch.count, begin + seg_elems_);
  *bytes = (end - begin) * elem_size_;
  return base_ + (ch.offset + begin) * elem_size_;
}

void RingPass::run() {
  const int p = c_.world;
  if (p == 1 || segs_per_step_ == 0 || first_step_ >= last_step_) return;
  const int reduceSteps = p - 1;  // steps [0, p−1) reduce, the rest only copy
  const size_t units = static_cast<size_t>(last_step_ - first_step_) * segs_per_step_;
  uint8_t* landing = c_.scratchBytes(seg_elems_ * elem_size_);
  // At step s rank r sends chunk r−s−1 and receives chunk r−s−2: what it receives at step s it
  // sends on at step s+1, and after step p−2 it holds the complete sum of chunk r.
  auto stepOf = [&](size_t unit) { return first_step_ + static_cast<int>(unit / segs_per_step_); };
  auto sendChunk = [&](int step) { return c_.mod(c_.rank - step - 1); };
  auto recvChunk = [&](int step) { return c_.mod(c_.rank - step - 2); };

  net::Transfer t;
  t.send_to = c_.peer(c_.mod(c_.rank + 1));
  t.recv_from = c_.peer(c_.mod(c_.rank - 1));
  t.send_units = t.recv_units = units;
  t.send_span = [&](size_t u) {
    net::Span span;
    span.data = segment(sendChunk(stepOf(u)), u % segs_per_step_, &span.bytes);
    return span;
  };
  // Why this gate is all the pipelining there is: segment j of step s is the segment j that was
  // received (and reduced) at step s−1, so it may leave as soon as that one unit is done, not
  // when the whole previous step is. Segments therefore stream around the ring back to back:
  // while this rank reduces segment j, the kernel is already moving j+1 in and j−1 out, and the
  // reduce-scatter flows into the all-gather without a barrier between them.
  t.send_after_recvs = [&](size_t u) -> size_t {
    return u < segs_per_step_ ? 0 : u - segs_per_step_ + 1;
  };
  t.recv_span = [&](size_t u) {
    net::Span span;
    void* dst = segment(recvChunk(stepOf(u)), u % segs_per_step_, &span.bytes);
    // Reduce-scatter segments land in scratch and are folded in; all-gather ones in place.
    span.data = stepOf(u) < reduceSteps ? landing : dst;
    return span;
  };
  // Folds the reduce-scatter segment at `src` into its place in the buffer; an all-gather one is
  // copied there (only when it arrived in a shared-memory slot: inline ones landed in place).
  auto absorb = [&](size_t u, const void* src) {
    const int step = stepOf(u);
    size_t bytes = 0;
    void* dst = segment(recvChunk(step), u % segs_per_step_, &bytes);
    if (step >= reduceSteps) {
      if (src != dst) std::memcpy(dst, src, bytes);
      return;
    }
    reduceInto(dst, src, bytes / elem_size_, dtype_, op_);
    if (step == reduceSteps - 1 && op_ == ReduceOp::kAvg)
      divideBy(dst, bytes / elem_size_, dtype_, p);
  };
  t.on_received = [&](size_t u) {
    if (stepOf(u) < reduceSteps) absorb(u, landing);
  };
  // Over shared memory the peer's segment is reduced straight from its slot: no landing copy.
  t.recv_in_place = absorb;
  net::runTransfer(c_.op, t);
}

void ringAllreduce(const Collective& c, Buffer& buffer, ReduceOp op) {
  RingPass(c, buffer.data, buffer.dtype, op, evenChunks(buffer.count, c.world), 0,
           2 * (c.world - 1))
      .run();
}

void ringReduceScatter(const Collective& c, const Buffer& input, Buffer& output, ReduceOp op) {
  const size_t block = output.count;
  const size_t esize = elementSize(input.dtype);
  if (block == 0) return;  // nothing moves (and memcpy must not see null pointers)
  if (c.world == 1) {
    if (output.data != input.data) std::memmove(output.data, input.data, block * esize);
    return;
  }
  // Workspace after the landing segment; sized once so the pass's own request fits.
  const size_t landingBytes = std::max<size_t>(esize, c.segment_bytes / esize * esize);
  uint8_t* work = c.scratchBytes(landingBytes + input.bytes()) + landingBytes;
  std::memcpy(work, input.data, input.bytes());
  std::vector<RingPass::Chunk> chunks(static_cast<size_t>(c.world));
  for (size_t r = 0; r < chunks.size(); ++r) chunks[r] = {r * block, block};
  RingPass(c, work, input.dtype, op, std::move(chunks), 0, c.world - 1).run();
  std::memcpy(output.data, work + static_cast<size_t>(c.rank) * block * esize, block * esize);
}

void ringAllgather(const Collective& c, const Buffer& input, Buffer& output) {
  const size_t block = input.count;
  const size_t esize = elementSize(input.dtype);
  if (block == 0) return;
  auto* mine = static_cast<uint8_t*>(output.data) + static_cast<size_t>(c.rank) * block * esize;
  if (mine != input.data) std::memmove(mine, input.data, block * esize);
  std::vector<RingPass::Chunk> chunks(static_cast<size_t>(c.world));
  for (size_t r = 0; r < chunks.size(); ++r) chunks[r] = {r * block, block};
  RingPass(c, output.data, input.dtype, ReduceOp::kSum, std::move(chunks), c.world - 1,
           2 * (c.world - 1))
      .run();
}

}  // namespace cumulus::comm
