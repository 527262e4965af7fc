// PreemptionWatcher: the stop-step agreement across ranks (threads standing in for processes,
// with an in-memory MAX all-reduce), the checkpoint request that rides on the same agreement,
// the SIGTERM and SIGUSR1 handlers, and the deadline watchdog.
#include "cumulus/preemption.h"
#include "tests/wait_until.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace cumulus::checkpoint {
namespace {

// MAX all-reduce of one integer among `world` threads: each round completes when every rank has
// contributed, like comm::Communicator::allreduce on an int64 buffer with ReduceOp::kMax.
class ThreadMax {
 public:
  explicit ThreadMax(int world) : world_(world) {}
  int64_t operator()(int64_t value) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t round = round_;
    acc_ = arrived_ == 0 ? value : std::max(acc_, value);
    if (++arrived_ == world_) {
      result_ = acc_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    ++calls_;
    return result_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  const int world_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  int64_t acc_ = 0;
  int64_t result_ = 0;
  int calls_ = 0;
};

PreemptionOptions quiet() {
  PreemptionOptions options;
  options.grace_seconds = 0;  // no watchdog in these tests
  options.watch_sigterm = false;
  options.watch_sigusr1 = false;
  return options;
}

TEST(PreemptionTest, AloneStopsAfterTheStepOfTheNotice) {
  PreemptionWatcher watcher(agreeAlone(), quiet());
  EXPECT_FALSE(watcher.noticed());
  EXPECT_EQ(watcher.decide(0), StepAction::kContinue);
  EXPECT_EQ(watcher.decide(1), StepAction::kContinue);
  EXPECT_FALSE(watcher.stopStep().has_value());
  EXPECT_FALSE(watcher.secondsSinceNotice().has_value());
  watcher.notify();
  EXPECT_TRUE(watcher.noticed());
  EXPECT_EQ(watcher.decide(2), StepAction::kStop);
  EXPECT_EQ(watcher.stopStep(), 2);
  EXPECT_EQ(watcher.decide(3), StepAction::kStop);  // stays stopped
  EXPECT_EQ(watcher.stopStep(), 2);
}

TEST(PreemptionTest, NoticeTimeComesFromTheInjectedClock) {
  double now = 100;
  PreemptionOptions options = quiet();
  options.clock = [&] { return now; };
  PreemptionWatcher watcher(agreeAlone(), options);
  watcher.notify();
  now = 103.5;
  watcher.notify();  // the first notice's time is kept
  ASSERT_TRUE(watcher.secondsSinceNotice().has_value());
  EXPECT_DOUBLE_EQ(*watcher.secondsSinceNotice(), 3.5);
}

// Only rank `noticed_rank` gets the notice, at different points relative to the steps; every rank
// must stop after the same step: the first boundary at which the noticed rank saw it.
void runGroup(int world, int noticed_rank, int64_t notice_before_step) {
  ThreadMax agree(world);
  std::vector<int64_t> stopped(world, -1);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      PreemptionWatcher watcher([&](int64_t v) { return agree(v); }, quiet());
      for (int64_t step = 0; step < 100; ++step) {
        if (rank == noticed_rank && step == notice_before_step) watcher.notify();
        if (watcher.decide(step) == StepAction::kStop) {
          stopped[rank] = step;
          EXPECT_TRUE(watcher.noticed()) << "rank " << rank;  // the deadline applies to all
          return;
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(stopped[rank], notice_before_step)
        << "world " << world << " noticed rank " << noticed_rank << ", rank " << rank;
  }
  EXPECT_EQ(agree.calls(), world * (notice_before_step + 1));
}

TEST(PreemptionTest, EveryRankStopsAfterTheSameStep) {
  for (int world : {1, 2, 3, 5}) {
    for (int noticed = 0; noticed < world; ++noticed) {
      for (int64_t step : {0, 1, 7}) runGroup(world, noticed, step);
    }
  }
}

TEST(PreemptionTest, AllRanksNoticedAtDifferentStepsStopAtTheFirst) {
  const int world = 4;
  ThreadMax agree(world);
  std::vector<int64_t> stopped(world, -1);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      PreemptionWatcher watcher([&](int64_t v) { return agree(v); }, quiet());
      for (int64_t step = 0; step < 100; ++step) {
        if (step == 3 + rank) watcher.notify();  // rank 0 first, at step 3
        if (watcher.decide(step) == StepAction::kStop) {
          stopped[rank] = step;
          return;
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(stopped, std::vector<int64_t>(world, 3));
}

// Rank `requester` asks for a checkpoint before step `request_step`; every rank must checkpoint
// after that same step and only then, and go on to the end: one agreement round per step.
TEST(PreemptionTest, ACheckpointRequestIsAgreedByEveryRankAndTrainingGoesOn) {
  for (int world : {1, 2, 3}) {
    for (int requester = 0; requester < world; ++requester) {
      const int64_t request_step = 4;
      ThreadMax agree(world);
      std::vector<std::vector<int64_t>> checkpointed(world);
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < world; ++rank) {
        ranks.emplace_back([&, rank] {
          PreemptionWatcher watcher([&](int64_t v) { return agree(v); }, quiet());
          for (int64_t step = 0; step < 10; ++step) {
            if (rank == requester && step == request_step) watcher.requestCheckpoint();
            const StepAction action = watcher.decide(step);
            EXPECT_NE(action, StepAction::kStop);
            if (action == StepAction::kCheckpoint) checkpointed[rank].push_back(step);
          }
          EXPECT_FALSE(watcher.noticed());
          EXPECT_FALSE(watcher.stopStep().has_value());
        });
      }
      for (auto& t : ranks) t.join();
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(checkpointed[rank], std::vector<int64_t>{request_step})
            << "world " << world << " requester " << requester << ", rank " << rank;
      }
      EXPECT_EQ(agree.calls(), world * 10);
    }
  }
}

TEST(PreemptionTest, ANoticeWinsOverACheckpointRequestAtTheSameStep) {
  const int world = 3;
  ThreadMax agree(world);
  std::vector<StepAction> at_step_2(world, StepAction::kContinue);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      PreemptionWatcher watcher([&](int64_t v) { return agree(v); }, quiet());
      if (rank == 0) watcher.requestCheckpoint();
      EXPECT_EQ(watcher.decide(0), StepAction::kCheckpoint);
      EXPECT_EQ(watcher.decide(1), StepAction::kContinue);
      if (rank == 0) watcher.requestCheckpoint();
      if (rank == 2) watcher.notify();
      at_step_2[rank] = watcher.decide(2);
      EXPECT_EQ(watcher.stopStep(), 2);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(at_step_2, std::vector<StepAction>(world, StepAction::kStop));
}

TEST(PreemptionTest, RequestsBeforeOneRoundAreAnsweredByOneCheckpoint) {
  std::vector<int64_t> proposals;
  PreemptionWatcher watcher(
      [&](int64_t v) {
        proposals.push_back(v);
        return v;
      },
      quiet());
  watcher.requestCheckpoint();
  watcher.requestCheckpoint();
  EXPECT_EQ(watcher.decide(5), StepAction::kCheckpoint);
  EXPECT_EQ(watcher.decide(6), StepAction::kContinue);
  watcher.requestCheckpoint();
  EXPECT_EQ(watcher.decide(7), StepAction::kCheckpoint);
  watcher.notify();
  EXPECT_EQ(watcher.decide(8), StepAction::kStop);
  // -1: nothing; 4·step + 1: checkpoint; 4·step + 2: stop.
  EXPECT_EQ(proposals, (std::vector<int64_t>{21, -1, 29, 34}));
}

TEST(PreemptionTest, Sigusr1IsACheckpointRequest) {
  installCheckpointSignalHandler();
  PreemptionOptions options = quiet();
  options.watch_sigusr1 = true;
  PreemptionWatcher watcher(agreeAlone(), options);
  const uint64_t before = checkpointSignalsReceived();
  // Seen before this watcher existed (a request that waited in the blocked mask): answered once.
  const StepAction first = watcher.decide(0);
  EXPECT_EQ(first, before > 0 ? StepAction::kCheckpoint : StepAction::kContinue);
  ASSERT_EQ(::raise(SIGUSR1), 0);  // the handler counts it; the process goes on
  EXPECT_EQ(checkpointSignalsReceived(), before + 1);
  EXPECT_EQ(watcher.decide(1), StepAction::kCheckpoint);
  EXPECT_EQ(watcher.decide(2), StepAction::kContinue);
  EXPECT_FALSE(watcher.noticed());
  // A later watcher in this process would take the signal for a request it has not answered.
  resetCheckpointSignalsForTesting();
}

TEST(PreemptionTest, AgreementErrorPropagates) {
  PreemptionWatcher watcher([](int64_t) -> int64_t { throw std::runtime_error("peer 1 died"); },
                            quiet());
  EXPECT_THROW(watcher.decide(0), std::runtime_error);
}

TEST(PreemptionTest, SigtermIsTheNotice) {
  resetSigtermForTesting();
  installSigtermHandler();
  PreemptionOptions options = quiet();
  options.watch_sigterm = true;
  PreemptionWatcher watcher(agreeAlone(), options);
  EXPECT_EQ(watcher.decide(0), StepAction::kContinue);
  ASSERT_EQ(::raise(SIGTERM), 0);  // the handler records it; the process goes on
  EXPECT_TRUE(sigtermReceived());
  EXPECT_EQ(watcher.decide(1), StepAction::kStop);
  EXPECT_EQ(watcher.stopStep(), 1);
  resetSigtermForTesting();
  signal(SIGTERM, SIG_DFL);
}

// A checkpoint that hangs past the grace period: the watchdog exits the process with code 75.
TEST(PreemptionTest, WatchdogExitsWithCode75AfterTheGrace) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PreemptionOptions options;
    options.grace_seconds = 0.3;
    options.watch_sigterm = false;
    PreemptionWatcher watcher(agreeAlone(), options);
    watcher.startWatchdog();
    watcher.notify();
    watcher.decide(0);
    // "The checkpoint write hangs": block until the watchdog ends the process. SIGALRM after
    // 10 s bounds the test if it never does (the status check below then fails).
    alarm(10);
    for (;;) pause();
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kExitPreempted);
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 3.0);
}

TEST(PreemptionTest, WatchdogWithoutNoticeNeverFires) {
  PreemptionOptions options;
  options.grace_seconds = 0.05;
  options.watch_sigterm = false;
  options.watch_sigusr1 = false;  // Sigusr1IsACheckpointRequest may have raised one
  {
    PreemptionWatcher watcher(agreeAlone(), options);
    watcher.startWatchdog();
    // Ten looks at least 10 ms apart span 90 ms, beyond the 50 ms grace, with no notice.
    EXPECT_TRUE(cumulus::testing::waitUntil([&] { return watcher.watchdogLooks() >= 10; },
                                            std::chrono::seconds(10)))
        << watcher.watchdogLooks() << " looks";
    EXPECT_EQ(watcher.decide(0), StepAction::kContinue);
  }  // the destructor stops the watchdog; we are still alive
  SUCCEED();
}

}  // namespace
}  // namespace cumulus::checkpoint
