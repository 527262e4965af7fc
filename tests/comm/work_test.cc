// The async Work contract (comm/work.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <numeric>
#include <thread>

#include "comm/error.h"
#include "comm/net/socket.h"
#include "comm/rendezvous.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Group;

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

}  // namespace
}  // namespace cumulus::comm
