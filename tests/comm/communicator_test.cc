// The Communicator (comm/communicator.h): the all-reduce correctness matrix over every algorithm,
// transport and world size; bit-identical results; the algorithm it resolves; the barrier; a
// named IPv6 bind host.
//
// The matrix: algorithm {tree, ring} × world {1,2,3,4,5,8} × count {0, 1, 7, p−1, 4097, 2^20+3}
// × every dtype × every op, all ranks as threads over loopback. Inputs are small integers, so
// every partial sum is exact in every dtype (even bfloat16) and the expected value is computed
// independently in int64 arithmetic. For kAvg of floating types the inputs are scaled by p, so
// the quotient is exact too; integer kAvg truncates toward zero.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include "collectives_suite.h"
#include "comm/error.h"
#include "comm/tcp/socket.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using testing::Collectives;
using testing::Group;

// IEEE binary16 as comm/reduce.cc spells it: clang 14 (make thread-safety) has no _Float16 on
// x86-64, and its __fp16 has the same storage and conversions.
#if defined(__clang__) && __clang_major__ < 15
using Half = __fp16;
#else
using Half = _Float16;
#endif

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                         DType::kFloat16, DType::kInt32,   DType::kInt64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

bool isFloating(DType d) { return d != DType::kInt32 && d != DType::kInt64; }

int64_t base(int rank, size_t i) { return static_cast<int64_t>((i * 7 + rank * 13) % 11) - 5; }

int64_t input(int rank, size_t i, int p, DType d, ReduceOp op) {
  return (op == ReduceOp::kAvg && isFloating(d)) ? base(rank, i) * p : base(rank, i);
}

int64_t expected(size_t i, int p, DType d, ReduceOp op) {
  int64_t acc = base(0, i);
  for (int r = 1; r < p; ++r) {
    const int64_t v = base(r, i);
    acc = op == ReduceOp::kMax   ? std::max(acc, v)
          : op == ReduceOp::kMin ? std::min(acc, v)
                                 : acc + v;
  }
  return acc;  // avg: floats were scaled by p, so the average is the plain sum of `base`
}

int64_t expectedAvgInt(size_t i, int p) {
  int64_t sum = 0;
  for (int r = 0; r < p; ++r) sum += base(r, i);
  return sum / p;  // C++: toward zero
}

// Independent encoders: small integers are exact in every type, so no rounding is involved.
void store(void* data, size_t i, DType d, int64_t v) {
  switch (d) {
    case DType::kFloat32:
      static_cast<float*>(data)[i] = float(v);
      break;
    case DType::kFloat64:
      static_cast<double*>(data)[i] = double(v);
      break;
    case DType::kFloat16:
      static_cast<Half*>(data)[i] = Half(float(v));
      break;
    case DType::kBFloat16: {
      float f = float(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(data)[i] = uint16_t(bits >> 16);  // exact: low bits are zero
      break;
    }
    case DType::kInt32:
      static_cast<int32_t*>(data)[i] = int32_t(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(data)[i] = v;
      break;
  }
}

double load(const void* data, size_t i, DType d) {
  switch (d) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DType::kFloat64:
      return static_cast<const double*>(data)[i];
    case DType::kFloat16:
      return float(static_cast<const Half*>(data)[i]);
    case DType::kBFloat16: {
      uint32_t bits = uint32_t(static_cast<const uint16_t*>(data)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kInt32:
      return static_cast<const int32_t*>(data)[i];
    case DType::kInt64:
      return double(static_cast<const int64_t*>(data)[i]);
  }
  return 0;
}

// (world, transport): the whole matrix runs over TCP, AF_UNIX and shared memory (large segments
// through slots, small ones inline: counts 4097 and 2^20+3 take both paths).
class AllreduceMatrix : public ::testing::TestWithParam<std::tuple<int, Transport>> {};

TEST_P(AllreduceMatrix, EveryAlgorithmCountDTypeAndOp) {
  const int p = std::get<0>(GetParam());
  CommunicatorOptions options;
  options.transport = std::get<1>(GetParam());
  // The shared-memory pairs also run the spinning wait (off by default) where it can pay.
  if (options.transport == Transport::kShm && p == 2) options.spin_micros = 20;
  Group group(p, options);
  const std::vector<size_t> counts = {0, 1, 7, size_t(p - 1), 4097, (size_t(1) << 20) + 3};
  std::vector<std::string> failures(p);
  group.run([&](int rank, Communicator& comm) {
    std::vector<uint8_t> data;
    for (Algorithm algorithm : {Algorithm::kTree, Algorithm::kRing}) {
      for (size_t count : counts) {
        for (DType d : kDTypes) {
          for (ReduceOp op : kOps) {
            data.assign(count * elementSize(d) + 1, 0xAB);
            for (size_t i = 0; i < count; ++i) store(data.data(), i, d, input(rank, i, p, d, op));
            Buffer buffer{data.data(), count, d};
            comm.allreduce(buffer, {op, algorithm});
            for (size_t i = 0; i < count; ++i) {
              const double want = (op == ReduceOp::kAvg && !isFloating(d))
                                      ? double(expectedAvgInt(i, p))
                                      : double(expected(i, p, d, op));
              const double got = load(data.data(), i, d);
              if (got != want) {
                std::ostringstream msg;
                msg << algorithmName(algorithm) << " p=" << p << " rank " << rank
                    << " count=" << count << " " << dtypeName(d) << " " << reduceOpName(op)
                    << ": index " << i << " got " << got << " want " << want;
                failures[rank] = msg.str();
                return;
              }
            }
            if (data.back() != 0xAB) {
              failures[rank] = "wrote past the end of the buffer";
              return;
            }
          }
        }
      }
    }
  });
  for (int r = 0; r < p; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(World, AllreduceMatrix,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values(Transport::kTcp, Transport::kUnix,
                                                              Transport::kShm)),
                         [](const auto& info) {
                           return "p" + std::to_string(std::get<0>(info.param)) + "_" +
                                  transportName(std::get<1>(info.param));
                         });

// Random (non-integer) float32 data: results are bit-identical across repeated runs, across
// ranks and across transports (the summation order belongs to the algorithm, not to what carries
// the bytes: shared memory reduces from the peer's slot, the sockets from a landing buffer), for
// each algorithm; and the two algorithms agree to rounding.
TEST(Allreduce, BitIdenticalAcrossRunsRanksAndTransports) {
  const int p = 5;
  const size_t count = 300007;
  std::vector<std::vector<float>> inputs(p, std::vector<float>(count));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& in : inputs) {
    for (auto& v : in) v = dist(rng);
  }
  std::vector<float> reference[2];  // rank 0's result per algorithm, on the first transport
  for (Transport transport : {Transport::kTcp, Transport::kShm}) {
    CommunicatorOptions o;
    o.segment_bytes = 64 * 1024;  // many segments: the pipeline's order is exercised
    o.transport = transport;
    Group group(p, o);
    for (Algorithm algorithm : {Algorithm::kTree, Algorithm::kRing}) {
      std::vector<std::vector<float>> first(p), second(p);
      for (auto* out : {&first, &second}) {
        group.run([&](int rank, Communicator& comm) {
          (*out)[rank] = inputs[rank];
          Buffer b{(*out)[rank].data(), count, DType::kFloat32};
          comm.allreduce(b, {ReduceOp::kSum, algorithm});
        });
      }
      const std::string what =
          std::string(algorithmName(algorithm)) + " over " + transportName(transport);
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(std::memcmp(first[r].data(), second[r].data(), count * 4), 0)
            << what << " rank " << r << " differs between runs";
        ASSERT_EQ(std::memcmp(first[0].data(), first[r].data(), count * 4), 0)
            << what << " rank " << r << " differs from rank 0";
      }
      std::vector<float>& ref = reference[algorithm == Algorithm::kRing];
      if (ref.empty()) {
        ref = first[0];
      } else {
        ASSERT_EQ(std::memcmp(ref.data(), first[0].data(), count * 4), 0)
            << what << " differs from the same algorithm over tcp";
      }
      for (size_t i = 0; i < count; i += 997) {
        double exact = 0;
        for (int r = 0; r < p; ++r) exact += inputs[r][i];
        ASSERT_NEAR(first[0][i], exact, 1e-5) << what << " index " << i;
      }
    }
  }
}

TEST(Allreduce, AutoUsesTheCostModelAndFunnelNeedsAServer) {
  CommunicatorOptions options;
  options.cost_model = CostModel(10e-6, 0.25e-9, 0.1e-9);
  // p = 4: at p = 2 and 3 ring never costs more than tree (2(p−1) = 2⌈log₂p⌉ messages).
  Group group(4, options);
  EXPECT_EQ(group.at(0).resolve(Algorithm::kAuto, 64), Algorithm::kTree);
  EXPECT_EQ(group.at(0).resolve(Algorithm::kAuto, 64 << 20), Algorithm::kRing);
  EXPECT_EQ(group.at(0).resolve(Algorithm::kTree, 64 << 20), Algorithm::kTree);
  std::vector<float> v(10, 1.0f);
  Buffer b{v.data(), v.size(), DType::kFloat32};
  try {
    group.at(1).allreduce(b, {ReduceOp::kSum, Algorithm::kFunnel});
    FAIL() << "funnel without a RemoteReducer must throw";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_NE(std::string(e.what()).find("parameter server endpoint"), std::string::npos);
  }
  // The rejected call consumed no sequence number, so the group is still in step.
  group.run([](int, Communicator& comm) {
    std::vector<float> x(1000, 2.0f);
    Buffer buf{x.data(), x.size(), DType::kFloat32};
    comm.allreduce(buf);
    for (float f : x) ASSERT_EQ(f, 8.0f);
  });
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
  options.bind_host = "::1";
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
