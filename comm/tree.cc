#include "comm/tree.h"

#include <algorithm>
#include <vector>

#include "comm/reduce.h"

namespace cumulus::comm {
namespace {

// Segment layout shared by both ends of every tree message.
struct Segments {
  Segments(const Collective& c, const Buffer& b)
      : base(static_cast<char*>(b.data)), total(b.bytes()), esize(elementSize(b.dtype)) {
    size = std::max(esize, c.segment_bytes / esize * esize);
    count = (total + size - 1) / size;
  }
  net::Span at(size_t i) const {
    const size_t begin = i * size;
    return {base + begin, std::min(size, total - begin)};
  }
  char* base;
  size_t total, esize, size, count;
};

}  // namespace

void treeReduce(const Collective& c, Buffer& buffer, ReduceOp op, int root) {
  const int p = c.world;
  const int v = c.mod(c.rank - root);
  const Segments segs(c, buffer);
  if (segs.count == 0 || p == 1) {
    if (op == ReduceOp::kAvg) divideBy(buffer.data, buffer.count, buffer.dtype, p);
    return;
  }
  uint8_t* landing = c.scratchBytes(segs.size);
  // Children are v+1, v+2, v+4, … below the first set bit of v; the parent is v − lowbit(v).
  int lastMask = 1;
  while (lastMask < p && !(v & lastMask)) lastMask <<= 1;
  std::vector<int> children;
  for (int mask = 1; mask < lastMask && mask < p; mask <<= 1) {
    if (v + mask < p) children.push_back(c.mod(c.rank + mask));
  }
  const bool hasParent = v != 0;
  const int parent = c.mod(c.rank - lastMask);

  for (size_t k = 0; k < children.size(); ++k) {
    net::Transfer t;
    t.recv_from = c.peer(children[k]);
    t.recv_units = segs.count;
    t.recv_span = [&](size_t i) { return net::Span{landing, segs.at(i).bytes}; };
    // Inline segments land in scratch; shared-memory ones are reduced from the peer's slot.
    t.recv_in_place = [&](size_t i, const void* src) {
      net::Span dst = segs.at(i);
      reduceInto(dst.data, src, dst.bytes / segs.esize, buffer.dtype, op);
    };
    t.on_received = [&](size_t i) { t.recv_in_place(i, landing); };
    // Why the last child is special: once segment i of the last child is folded in, segment i
    // of our result is final, so it can go up to the parent right away instead of after the
    // whole buffer: the reduction pipelines up the tree.
    if (hasParent && k + 1 == children.size()) {
      t.send_to = c.peer(parent);
      t.send_units = segs.count;
      t.send_span = [&](size_t i) { return segs.at(i); };
      t.send_after_recvs = [](size_t i) { return i + 1; };
    }
    net::runTransfer(c.op, t);
  }
  if (hasParent && children.empty()) {
    net::Transfer t;
    t.send_to = c.peer(parent);
    t.send_units = segs.count;
    t.send_span = [&](size_t i) { return segs.at(i); };
    net::runTransfer(c.op, t);
  }
  if (!hasParent && op == ReduceOp::kAvg) divideBy(buffer.data, buffer.count, buffer.dtype, p);
}

void treeBroadcast(const Collective& c, Buffer& buffer, int root) {
  const int p = c.world;
  const int v = c.mod(c.rank - root);
  const Segments segs(c, buffer);
  if (segs.count == 0 || p == 1) return;
  int lastMask = 1;
  while (lastMask < p && !(v & lastMask)) lastMask <<= 1;
  // Largest subtree first: it has the longest way to go.
  std::vector<int> children;
  for (int mask = lastMask >> 1; mask >= 1; mask >>= 1) {
    if (v + mask < p) children.push_back(c.mod(c.rank + mask));
  }
  const bool hasParent = v != 0;
  size_t k = 0;
  if (hasParent) {
    // Receive straight into the user's buffer, forwarding each segment to the first child as
    // soon as it is complete.
    net::Transfer t;
    t.recv_from = c.peer(c.mod(c.rank - lastMask));
    t.recv_units = segs.count;
    t.recv_span = [&](size_t i) { return segs.at(i); };
    if (!children.empty()) {
      t.send_to = c.peer(children[k++]);
      t.send_units = segs.count;
      t.send_span = [&](size_t i) { return segs.at(i); };
      t.send_after_recvs = [](size_t i) { return i + 1; };
    }
    net::runTransfer(c.op, t);
  }
  for (; k < children.size(); ++k) {
    net::Transfer t;
    t.send_to = c.peer(children[k]);
    t.send_units = segs.count;
    t.send_span = [&](size_t i) { return segs.at(i); };
    net::runTransfer(c.op, t);
  }
}

void treeAllreduce(const Collective& c, Buffer& buffer, ReduceOp op) {
  treeReduce(c, buffer, op, 0);
  treeBroadcast(c, buffer, 0);
}

}  // namespace cumulus::comm
