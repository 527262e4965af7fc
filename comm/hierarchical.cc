#include "comm/hierarchical.h"

#include <cassert>
#include <utility>
#include <vector>

#include "comm/reduce.h"
#include "comm/ring.h"

namespace cumulus::comm {
namespace {

// A ring over `members` (global ranks; this rank among them) on the parent's pairs: rank i of the
// sub-ring is members[i].
Collective subRing(const Collective& parent, const std::vector<int>& members) {
  Collective sub;
  sub.world = static_cast<int>(members.size());
  sub.pairs.assign(members.size(), nullptr);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == parent.rank) {
      sub.rank = static_cast<int>(i);
    } else {
      sub.pairs[i] = parent.peer(members[i]);
    }
  }
  sub.op = parent.op;
  sub.segment_bytes = parent.segment_bytes;
  sub.scratch = parent.scratch;
  return sub;
}

}  // namespace

void hierarchicalAllreduce(const Collective& c, const Topology& topology, Buffer& buffer,
                           ReduceOp op) {
  assert(topology.world() == c.world);
  if (!topology.uniform()) return ringAllreduce(c, buffer, op);
  const int host = topology.hostOf(c.rank);
  const int local = topology.localIndexOf(c.rank);
  std::vector<int> crossMembers;
  for (int h = 0; h < topology.hosts(); ++h) crossMembers.push_back(topology.ranksOn(h)[local]);
  const Collective inHost = subRing(c, topology.ranksOn(host));
  const Collective acrossHosts = subRing(c, crossMembers);
  const int L = inHost.world;
  const int H = acrossHosts.world;

  // The passes sum for kAvg: each would divide by its own sub-world, the result needs the world.
  const ReduceOp passOp = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const std::vector<RingPass::Chunk> chunks = evenChunks(buffer.count, L);
  RingPass(inHost, buffer.data, buffer.dtype, passOp, chunks, 0, L - 1).run();  // (a)

  const RingPass::Chunk mine = chunks[static_cast<size_t>(local)];
  std::vector<RingPass::Chunk> shards = evenChunks(mine.count, H);
  for (RingPass::Chunk& shard : shards) shard.offset += mine.offset;
  RingPass(acrossHosts, buffer.data, buffer.dtype, passOp, std::move(shards), 0, 2 * (H - 1))
      .run();  // (b)
  if (op == ReduceOp::kAvg && mine.count > 0) {
    divideBy(static_cast<char*>(buffer.data) + mine.offset * elementSize(buffer.dtype), mine.count,
             buffer.dtype, c.world);
  }

  RingPass(inHost, buffer.data, buffer.dtype, passOp, chunks, L - 1, 2 * (L - 1)).run();  // (c)
}

}  // namespace cumulus::comm
