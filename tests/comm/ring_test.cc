// Ring collectives (comm/ring.h): the chunk split, and all-gather and reduce-scatter through the
// Communicator, checked against known answers.
#include <gtest/gtest.h>

#include <numeric>
#include <utility>
#include <vector>

#include "collectives_suite.h"
#include "comm/ring.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using testing::Collectives;
using testing::Group;

TEST_P(Collectives, AllgatherAndReduceScatter) {
  const int p = GetParam();
  Group group(p, [] {
    CommunicatorOptions o;
    o.segment_bytes = 1024;
    return o;
  }());
  for (size_t block : {size_t(0), size_t(1), size_t(3001)}) {
    group.run([&](int rank, Communicator& comm) {
      std::vector<int32_t> in(block), out(block * p, -1);
      for (size_t i = 0; i < block; ++i) in[i] = int32_t(rank * 100000 + i);
      Buffer bin{in.data(), block, DType::kInt32}, bout{out.data(), out.size(), DType::kInt32};
      comm.allgather(bin, bout);
      for (int r = 0; r < p; ++r) {
        for (size_t i = 0; i < block; ++i) {
          ASSERT_EQ(out[r * block + i], int32_t(r * 100000 + i)) << "block " << r << " i " << i;
        }
      }
      // reduce_scatter: rank r gets Σ_q (q + j·p + i) over block r, where j = block index.
      std::vector<float> full(block * p), mine(block, -1.0f);
      for (size_t k = 0; k < full.size(); ++k) full[k] = float(rank) + float(k % 17);
      const std::vector<float> before = full;
      Buffer fin{full.data(), full.size(), DType::kFloat32},
          fout{mine.data(), block, DType::kFloat32};
      comm.reduceScatter(fin, fout, ReduceOp::kSum);
      EXPECT_EQ(full, before) << "reduce_scatter must not modify its input";
      for (size_t i = 0; i < block; ++i) {
        const size_t k = size_t(rank) * block + i;
        const float want = float(p * (p - 1) / 2) + float(p) * float(k % 17);
        ASSERT_EQ(mine[i], want) << "rank " << rank << " i " << i;
      }
    });
  }
}
TEST(Ring, ChunksCoverTheBufferAndDifferByAtMostOneElement) {
  auto spans = [](size_t count, int parts) {
    std::vector<std::pair<size_t, size_t>> out;
    for (const RingPass::Chunk& c : evenChunks(count, parts)) out.emplace_back(c.offset, c.count);
    return out;
  };
  using Spans = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(spans(10, 4), (Spans{{0, 3}, {3, 3}, {6, 2}, {8, 2}}));
  EXPECT_EQ(spans(2, 4), (Spans{{0, 1}, {1, 1}, {2, 0}, {2, 0}}));
  EXPECT_EQ(spans(0, 3), (Spans{{0, 0}, {0, 0}, {0, 0}}));
  EXPECT_EQ(spans(7, 1), (Spans{{0, 7}}));
}

}  // namespace
}  // namespace cumulus::comm
