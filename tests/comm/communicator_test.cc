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

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "allreduce_values.h"
#include "collectives_suite.h"
#include "comm/error.h"
#include "comm/net/frame.h"
#include "comm/net/socket.h"
#include "comm/ring.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using testing::Collectives;
using testing::Group;

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
    for (Algorithm algorithm : {Algorithm::kTree, Algorithm::kRing}) {
      failures[rank] = testing::checkAllreduceMatrix(comm, algorithm, counts);
      if (!failures[rank].empty()) return;
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

// kProduct and the bitwise ops through both algorithms, reduce and reduce_scatter, over three
// ranks; expected values folded here in int64 (every product is small and exact in float32).
TEST(Allreduce, ProductAndBitwiseOpsOverEveryPath) {
  constexpr int p = 3;
  constexpr size_t n = 4099;  // several ring segments of uneven length
  Group group(p);
  const auto factor = [](int rank, size_t i) { return static_cast<int64_t>(i % 3 + rank + 1); };
  const auto pattern = [](int rank, size_t i) {
    return static_cast<int64_t>((i * 2654435761u + static_cast<size_t>(rank) * 40503u) & 0xffff);
  };
  std::vector<std::string> failures(p);
  group.run([&](int rank, Communicator& comm) {
    std::ostringstream out;
    for (Algorithm algorithm : {Algorithm::kTree, Algorithm::kRing}) {
      std::vector<float> f(n);
      for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(factor(rank, i));
      Buffer fb{f.data(), n, DType::kFloat32};
      AllreduceOptions options;
      options.algorithm = algorithm;
      options.op = ReduceOp::kProduct;
      comm.allreduce(fb, options);
      for (size_t i = 0; i < n; ++i) {
        int64_t want = 1;
        for (int r = 0; r < p; ++r) want *= factor(r, i);
        if (f[i] != static_cast<float>(want)) {
          out << algorithmName(algorithm) << " product at " << i << ": " << f[i] << "\n";
          break;
        }
      }
      for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
        std::vector<int64_t> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = pattern(rank, i);
        Buffer vb{v.data(), n, DType::kInt64};
        options.op = op;
        comm.allreduce(vb, options);
        for (size_t i = 0; i < n; ++i) {
          int64_t want = pattern(0, i);
          for (int r = 1; r < p; ++r) {
            want = op == ReduceOp::kBand  ? (want & pattern(r, i))
                   : op == ReduceOp::kBor ? (want | pattern(r, i))
                                          : (want ^ pattern(r, i));
          }
          if (v[i] != want) {
            out << algorithmName(algorithm) << " " << reduceOpName(op) << " at " << i << "\n";
            break;
          }
        }
      }
    }
    // reduce to rank 1 and reduce_scatter, with the product of int32s.
    std::vector<int32_t> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<int32_t>(factor(rank, i));
    Buffer xb{x.data(), n, DType::kInt32};
    comm.reduce(xb, 1, ReduceOp::kProduct);
    if (rank == 1 && x[4] != (4 % 3 + 1) * (4 % 3 + 2) * (4 % 3 + 3)) out << "reduce product\n";
    std::vector<int32_t> in(n * p), block(n);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(factor(rank, i));
    Buffer ib{in.data(), in.size(), DType::kInt32}, ob{block.data(), n, DType::kInt32};
    comm.reduceScatter(ib, ob, ReduceOp::kProduct);
    const size_t first = static_cast<size_t>(rank) * n;
    int64_t want = 1;
    for (int r = 0; r < p; ++r) want *= factor(r, first);
    if (block[0] != want) out << "reduce_scatter product: " << block[0] << " not " << want << "\n";
    // A bitwise op on floats is refused before anything is sent; the group stays usable.
    std::vector<float> g(4, 1.0f);
    Buffer gb{g.data(), g.size(), DType::kFloat32};
    AllreduceOptions bor;
    bor.op = ReduceOp::kBor;
    try {
      comm.allreduce(gb, bor);
      out << "bor of float32 accepted\n";
    } catch (const CommError& e) {
      if (e.kind() != ErrorKind::kInvalid ||
          std::string(e.what()).find("the bitwise op bor needs an integer dtype (int32 or int64), "
                                     "not float32") == std::string::npos) {
        out << "bor refusal: " << e.what() << "\n";
      }
    }
    std::vector<int32_t> one(1, 1);
    Buffer oneb{one.data(), 1, DType::kInt32};
    comm.allreduce(oneb);
    if (one[0] != p) out << "after the refusal: " << one[0] << "\n";
    failures[rank] = out.str();
  });
  for (int r = 0; r < p; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

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
    net::Socket probe = net::Socket::listen("::1");
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

// bytesSent() counts exactly what the frame format puts on the transport. A ring all-reduce of
// N float32 at p = 2 cuts the buffer into 2 chunks of N/2 elements (2N bytes); each of its
// 2(p−1) steps sends one chunk as segments of min(segment_bytes, max(kMinSegmentBytes,
// chunk / kMinSegmentsPerChunk)) bytes, each segment one message with a 32-byte header. So each
// rank sends 2(p−1)/p · 4N payload bytes plus 32 · 2(p−1) · ⌈chunk / segment⌉ header bytes: for
// N = 100000, 400000 + 32 · 2 · 4 = 400256, on every transport (a shared-memory slot's payload
// counts as sent, its header still goes on the socket). The async path counts the same, and a
// barrier at p = 2 (a tree all-reduce of one int32) sends one 36-byte message from each rank.
// The handshakes of the rendezvous are not counted: a fresh group has sent nothing.
class BytesSent : public ::testing::TestWithParam<Transport> {};

TEST_P(BytesSent, RingAllreduceSendsThePayloadAndOneHeaderPerSegment) {
  constexpr int p = 2;
  constexpr size_t n = 100000;
  constexpr size_t chunkBytes = n / p * sizeof(float);
  const size_t segmentBytes =
      std::min(kDefaultSegmentBytes, std::max(kMinSegmentBytes, chunkBytes / kMinSegmentsPerChunk));
  const size_t segments = (chunkBytes + segmentBytes - 1) / segmentBytes;
  const uint64_t payload = 2 * (p - 1) * n * sizeof(float) / p;
  const uint64_t expected = payload + net::kFrameHeaderBytes * 2 * (p - 1) * segments;
  ASSERT_EQ(expected, 400256u);  // the arithmetic above, for the reader

  CommunicatorOptions options;
  options.transport = GetParam();
  Group group(p, options);
  std::vector<uint64_t> afterOne(p), afterTwo(p), afterBarrier(p);
  std::vector<std::map<std::string, OpStats>> stats(p);
  group.run([&](int rank, Communicator& comm) {
    EXPECT_EQ(comm.bytesSent(), 0u) << "rank " << rank;
    EXPECT_STREQ(comm.transportTo(1 - rank), transportName(GetParam()));
    std::vector<float> v(n, 1.0f);
    Buffer b{v.data(), v.size(), DType::kFloat32};
    comm.allreduce(b, {ReduceOp::kSum, Algorithm::kRing});
    afterOne[rank] = comm.bytesSent();
    comm.allreduceAsync(b, {ReduceOp::kSum, Algorithm::kRing})->wait();
    afterTwo[rank] = comm.bytesSent();
    comm.barrier();
    afterBarrier[rank] = comm.bytesSent();
    stats[rank] = comm.opStats();
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(afterOne[r], expected) << "rank " << r;
    EXPECT_EQ(afterTwo[r], 2 * expected) << "rank " << r;
    EXPECT_EQ(afterBarrier[r], 2 * expected + net::kFrameHeaderBytes + sizeof(int32_t))
        << "rank " << r;
    // opStats() splits the same bytes by kind: two all-reduces (blocking and async), a barrier.
    ASSERT_EQ(stats[r].size(), 2u) << "rank " << r;
    EXPECT_EQ(stats[r]["allreduce"].count, 2u);
    EXPECT_EQ(stats[r]["allreduce"].bytes_sent, 2 * expected);
    EXPECT_GT(stats[r]["allreduce"].seconds, 0);
    EXPECT_EQ(stats[r]["barrier"].count, 1u);
    EXPECT_EQ(stats[r]["barrier"].bytes_sent, net::kFrameHeaderBytes + sizeof(int32_t));
  }
}

INSTANTIATE_TEST_SUITE_P(Over, BytesSent,
                         ::testing::Values(Transport::kTcp, Transport::kUnix, Transport::kShm),
                         [](const auto& info) { return std::string(transportName(info.param)); });

TEST(BytesSent, AGroupOfOneSendsNothing) {
  Group group(1);
  Communicator& comm = group.at(0);
  std::vector<float> v(1000, 1.0f);
  Buffer b{v.data(), v.size(), DType::kFloat32};
  comm.allreduce(b, {ReduceOp::kSum, Algorithm::kRing});
  comm.broadcast(b, 0);
  comm.barrier();
  EXPECT_EQ(comm.bytesSent(), 0u);
}

// Rank 2 of four dies (its sockets close) while the others run a ring all-reduce. Rank 3 loses
// it first; rank 0 loses rank 3 or rank 1 after they shut their connections. Every survivor's
// error names rank 2 all the same: each failing rank records whom it blames in the Store before
// it shuts its connections, and a rank that loses a survivor reports what the record names.
TEST(CommunicatorFailure, EverySurvivorNamesTheRankThatDiedNotTheNeighbourItLost) {
  const int world = 4;
  MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(world);
  testing::spawn(world, [&](int rank) {
    CommunicatorOptions options;
    options.timeout = std::chrono::milliseconds(30000);
    comms[rank] = std::make_unique<Communicator>(rank, world, store, options);
  });
  comms[2].reset();
  std::vector<int> blamed(world, -9);
  std::vector<std::string> texts(world);
  testing::spawn(world, [&](int rank) {
    if (rank == 2) return;
    std::vector<float> v(1 << 20, 1.0f);
    Buffer b{v.data(), v.size(), DType::kFloat32};
    try {
      comms[rank]->allreduce(b, {ReduceOp::kSum, Algorithm::kRing});
    } catch (const CommError& e) {
      blamed[rank] = e.peer();
      texts[rank] = e.what();
    }
  });
  for (int rank : {0, 1, 3}) EXPECT_EQ(blamed[rank], 2) << "rank " << rank << ": " << texts[rank];
}

}  // namespace
}  // namespace cumulus::comm
