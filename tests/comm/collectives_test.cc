// broadcast, reduce, allgather, reduce_scatter, barrier and the async Work contract.
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

TEST(Work, AsyncOperationsRunInOrderAndReportCompletion) {
  const int p = 3;
  Group group(p);
  group.run([&](int rank, Communicator& comm) {
    const uint64_t firstSeq = comm.nextSeq();
    std::vector<std::vector<float>> data(4, std::vector<float>(200000, float(rank + 1)));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& d : data) {
      Buffer b{d.data(), d.size(), DType::kFloat32};
      works.push_back(comm.allreduceAsync(b, {ReduceOp::kSum, Algorithm::kRing}));
    }
    // A blocking call behind queued work waits its turn (seq order is submission order).
    std::vector<float> last(10, 1.0f);
    Buffer lb{last.data(), last.size(), DType::kFloat32};
    comm.allreduce(lb);
    for (size_t k = 0; k < works.size(); ++k) {
      EXPECT_TRUE(works[k]->isCompleted());
      EXPECT_EQ(works[k]->seq(), firstSeq + k);
      EXPECT_EQ(works[k]->op(), "allreduce");
      works[k]->wait(1000ms);
      EXPECT_EQ(works[k]->exception(), nullptr);
      for (float v : data[k]) ASSERT_EQ(v, 6.0f);
    }
    for (float v : last) ASSERT_EQ(v, 3.0f);
    EXPECT_EQ(comm.nextSeq(), firstSeq + 5);
  });
}

TEST(Work, WaitWithTimeoutThrowsWhileThePeerIsLate) {
  Group group(2);
  std::promise<void> late_peer_may_start;
  std::future<void> late_peer_started = late_peer_may_start.get_future();
  group.run([&](int rank, Communicator& comm) {
    std::vector<float> v(16, 1.0f);
    Buffer b{v.data(), v.size(), DType::kFloat32};
    if (rank == 1) {  // late: joins only once rank 0's short wait timed out
      late_peer_started.wait();
      comm.allreduce(b);
      return;
    }
    auto work = comm.allreduceAsync(b);
    bool timed_out = false;
    try {
      work->wait(20ms);
    } catch (const CommError& e) {
      timed_out = true;
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
      EXPECT_EQ(e.op(), "allreduce");
      EXPECT_EQ(e.seq(), work->seq());
    }
    EXPECT_TRUE(timed_out) << "wait returned although the peer has not joined";
    EXPECT_FALSE(work->isCompleted());
    late_peer_may_start.set_value();
    work->wait();  // the operation itself goes on and succeeds
    EXPECT_TRUE(work->isCompleted());
    EXPECT_EQ(work->exception(), nullptr);
    for (float f : v) ASSERT_EQ(f, 2.0f);
  });
}

// Transport choice (comm/transport.h): same-host peers meet over shared memory unless one of them
// asks for AF_UNIX (then AF_UNIX) or TCP (then TCP), by an option or by CUMULUS_TRANSPORT.
TEST(Transport, SameHostPeersUseShmUnlessUnixOrTcpIsAsked) {
  MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(4);
  testing::spawn(4, [&](int r) {
    CommunicatorOptions o;
    o.jobToken = "t";
    o.transport = r == 1 ? Transport::kUnix : r == 3 ? Transport::kTcp : Transport::kAuto;
    comms[r] = std::make_unique<Communicator>(r, 4, store, o);
  });
  EXPECT_STREQ(comms[0]->transportTo(2), "shm");
  EXPECT_STREQ(comms[2]->transportTo(0), "shm");
  EXPECT_STREQ(comms[0]->transportTo(1), "unix");  // rank 1 asks for AF_UNIX
  EXPECT_STREQ(comms[2]->transportTo(1), "unix");  // rank 1 offers no shared memory
  EXPECT_STREQ(comms[1]->transportTo(2), "unix");
  EXPECT_STREQ(comms[0]->transportTo(3), "tcp");
  EXPECT_STREQ(comms[3]->transportTo(1), "tcp");
  EXPECT_STREQ(comms[3]->transportTo(3), "self");
  // Mixed carriers in one ring; 64 Ki elements per rank so that the shm pairs use slots.
  const size_t count = 1 << 18;
  std::vector<std::vector<int32_t>> v(4, std::vector<int32_t>(count));
  testing::spawn(4, [&](int r) {
    std::iota(v[r].begin(), v[r].end(), r);
    Buffer b{v[r].data(), v[r].size(), DType::kInt32};
    comms[r]->allreduce(b, {ReduceOp::kSum, Algorithm::kRing});
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(v[r][10], 46) << "rank " << r;
    EXPECT_EQ(v[r][count - 1], int32_t(4 * (count - 1) + 6)) << "rank " << r;
  }
}

TEST(Transport, UnixOrShmToAPeerOnAnotherHostIsARendezvousError) {
  for (Transport transport : {Transport::kUnix, Transport::kShm}) {
    MemoryStore store;  // a rank 0 that lives on another host
    store.set(localKey(0, 0), "some-other-boot-id/host/net\ncumulus/1/2/3");
    store.set(shmKey(0, 0), "some-other-boot-id/host/net\ncumulus/1/2/3/shm");
    store.set(addressKey(0, 0), "127.0.0.1:9");
    CommunicatorOptions o;
    o.transport = transport;
    o.timeout = 2s;
    try {
      Communicator(1, 2, store, o);
      ADD_FAILURE() << "expected a CommError";
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kRendezvous) << e.what();
      EXPECT_EQ(e.peer(), 0);
      const std::string want =
          std::string("transport '") + transportName(transport) + "' cannot reach rank 0";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(Transport, EnvironmentVariableDecidesUnderAuto) {
  EXPECT_EQ(parseTransport("unix"), Transport::kUnix);
  EXPECT_EQ(parseTransport("shm"), Transport::kShm);
  EXPECT_EQ(parseTransport("TCP"), std::nullopt);
  ::setenv("CUMULUS_TRANSPORT", "tcp", 1);
  {
    Group group(2);
    EXPECT_STREQ(group.at(0).transportTo(1), "tcp");
  }
  ::setenv("CUMULUS_TRANSPORT", "bogus", 1);
  MemoryStore store;
  try {
    Communicator(0, 2, store, {});
    ADD_FAILURE() << "expected a CommError";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_NE(std::string(e.what()).find("CUMULUS_TRANSPORT='bogus'"), std::string::npos)
        << e.what();
  }
  ::setenv("CUMULUS_TRANSPORT", "unix", 1);
  {
    Group group(2);
    EXPECT_STREQ(group.at(0).transportTo(1), "unix");
  }
  ::setenv("CUMULUS_TRANSPORT", "shm", 1);
  {
    Group group(2);
    EXPECT_STREQ(group.at(0).transportTo(1), "shm");
  }
  ::unsetenv("CUMULUS_TRANSPORT");
  Group group(2);
  EXPECT_STREQ(group.at(0).transportTo(1), "shm");
}

}  // namespace
}  // namespace cumulus::comm
