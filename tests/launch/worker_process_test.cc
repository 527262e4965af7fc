// WorkerProcess::waitFor with real child processes: it returns when the child exits, and at the
// deadline when it does not.

#include "launch/worker_process.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>

namespace cumulus::launch {
namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(WorkerProcess, WaitForReturnsWhenTheChildExits) {
  WorkerProcess p({"/bin/sh", "-c", "exit 3"}, {});
  p.start();
  ASSERT_TRUE(p.waitFor(30.0));
  EXPECT_EQ(p.poll().describe(), "exit code 3");
}

TEST(WorkerProcess, WaitForEndsAtTheDeadlineThenSeesTheKill) {
  WorkerProcess p({"/bin/sh", "-c", "exec sleep 30"}, {});
  p.start();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(p.waitFor(0.2));
  const double waited = secondsSince(t0);
  EXPECT_GE(waited, 0.2);
  EXPECT_LT(waited, 5.0);  // bounded by the deadline, not by the child
  EXPECT_FALSE(p.poll().exited);
  p.signal(SIGKILL);
  ASSERT_TRUE(p.waitFor(30.0));
  EXPECT_EQ(p.poll().describe(), "signal SIGKILL");
}

}  // namespace
}  // namespace cumulus::launch
