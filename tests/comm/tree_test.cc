// Binomial-tree collectives (comm/tree.h), through the Communicator: broadcast from and reduce
// to every root, and the tree all-reduce, checked against known answers.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "collectives_suite.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using testing::Collectives;
using testing::Group;

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const int p = GetParam();
  Group group(p, [] {
    CommunicatorOptions o;
    o.segment_bytes = 4096;  // several segments: exercises forwarding while receiving
    return o;
  }());
  for (size_t count : {size_t(0), size_t(1), size_t(5000)}) {
    for (int root = 0; root < p; ++root) {
      group.run([&](int rank, Communicator& comm) {
        std::vector<int64_t> v(count, -1);
        if (rank == root) std::iota(v.begin(), v.end(), int64_t(root) * 1000000);
        Buffer b{v.data(), count, DType::kInt64};
        comm.broadcast(b, root);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(v[i], int64_t(root) * 1000000 + int64_t(i))
              << "rank " << rank << " root " << root << " index " << i;
        }
      });
    }
  }
}

TEST_P(Collectives, ReduceToEveryRoot) {
  const int p = GetParam();
  Group group(p);
  const size_t count = 1001;
  for (int root = 0; root < p; ++root) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      group.run([&](int rank, Communicator& comm) {
        std::vector<double> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = double(rank * p) + double(i % 3);
        Buffer b{v.data(), count, DType::kFloat64};
        comm.reduce(b, root, op);
        if (rank != root) return;
        for (size_t i = 0; i < count; ++i) {
          // Σ_r (r·p + i%3) = p·p(p−1)/2 + p·(i%3)
          const double sum = double(p) * p * (p - 1) / 2 + double(p) * double(i % 3);
          const double want = op == ReduceOp::kSum   ? sum
                              : op == ReduceOp::kAvg ? sum / p
                                                     : double((p - 1) * p) + double(i % 3);
          ASSERT_EQ(v[i], want) << reduceOpName(op) << " root " << root << " index " << i;
        }
      });
    }
  }
}
// p = 6 is no power of two: the binomial tree skips the missing partners. Each rank contributes
// (rank, rank², 1), so every rank must end with (0+…+5, 0²+…+5², 6) = (15, 55, 6).
TEST(Tree, AllreduceSumsKnownValuesOnANonPowerOfTwoWorld) {
  const int p = 6;
  Group group(p);
  group.run([&](int rank, Communicator& comm) {
    std::vector<int64_t> v = {rank, int64_t(rank) * rank, 1};
    Buffer b{v.data(), v.size(), DType::kInt64};
    comm.allreduce(b, {ReduceOp::kSum, Algorithm::kTree});
    EXPECT_EQ(v, (std::vector<int64_t>{15, 55, 6})) << "rank " << rank;
  });
}

}  // namespace
}  // namespace cumulus::comm
