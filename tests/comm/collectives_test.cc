// broadcast, reduce, allgather, reduce_scatter and barrier (comm/communicator.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <numeric>
#include <thread>

#include "comm/error.h"
#include "comm/rendezvous.h"
#include "comm/tcp/socket.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Group;

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const int p = GetParam();
  Group group(p, [] {
    CommunicatorOptions o;
    o.segmentBytes = 4096;  // several segments: exercises forwarding while receiving
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

TEST_P(Collectives, AllgatherAndReduceScatter) {
  const int p = GetParam();
  Group group(p, [] {
    CommunicatorOptions o;
    o.segmentBytes = 1024;
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

TEST_P(Collectives, BarrierWaitsForTheLastRank) {
  const int p = GetParam();
  Group group(p);
  std::atomic<int> arrived{0};
  group.run([&](int rank, Communicator& comm) {
    // The last rank arrives only after all the others: any of them that left the barrier
    // without waiting for it would see arrived < p.
    if (rank == p - 1)
      while (arrived.load() < p - 1) std::this_thread::yield();
    arrived++;
    comm.barrier();
    EXPECT_EQ(arrived.load(), p) << "rank " << rank << " left the barrier early";
  });
}

INSTANTIATE_TEST_SUITE_P(World, Collectives, ::testing::Values(1, 2, 3, 5, 8));

TEST(Collectives, NamedIpv6BindHost) {
  try {
    tcp::Socket probe = tcp::Socket::listen("::1");
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  CommunicatorOptions options;
  options.bindHost = "::1";
  Group group(3, options);
  group.run([](int rank, Communicator& comm) {
    std::vector<int64_t> v(100, rank);
    Buffer b{v.data(), v.size(), DType::kInt64};
    comm.allreduce(b, {ReduceOp::kMax, Algorithm::kRing});
    for (int64_t x : v) ASSERT_EQ(x, 2);
  });
}

}  // namespace
}  // namespace cumulus::comm
