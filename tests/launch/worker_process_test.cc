// WorkerProcess with real child processes: waitFor returns when the worker exits, and at the
// deadline when it does not; the keeper between the launcher and the worker (worker_keeper.h)
// passes the worker's exact status on and leaves nothing of the worker's tree behind.

#include "launch/worker_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace cumulus::launch {
namespace {

double secondsSinceStart(std::chrono::steady_clock::time_point t0) {
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
  const double waited = secondsSinceStart(t0);
  EXPECT_GE(waited, 0.2);
  EXPECT_LT(waited, 5.0);  // bounded by the deadline, not by the child
  EXPECT_FALSE(p.poll().exited);
  p.signal(SIGKILL);
  ASSERT_TRUE(p.waitFor(30.0));
  EXPECT_EQ(p.poll().describe(), "signal SIGKILL");
}

TEST(WorkerProcess, TheStatusIsTheWorkersOwn) {
  const std::pair<std::string, std::string> cases[] = {
      {"exit 3", "exit code 3"},
      {"exit 0", "exit code 0"},
      {"kill -TERM $$", "signal SIGTERM"},
      {"kill -SEGV $$", "signal SIGSEGV"},  // re-raised by the keeper, without a core dump
      {"kill -KILL $$", "signal SIGKILL"},
  };
  for (const auto& [command, status] : cases) {
    WorkerProcess p({"/bin/sh", "-c", command}, {});
    p.start();
    ASSERT_TRUE(p.waitFor(30.0)) << command;
    EXPECT_EQ(p.poll().describe(), status) << command;
  }
}

TEST(WorkerProcess, SignalsReachTheWorkersGroupAndPidIsTheWorkers) {
  WorkerProcess p({"/bin/sh", "-c", "trap 'exit 7' TERM; echo $$; while true; do sleep 0.05; done"},
                  {});
  p.start();
  pollfd out{p.outputFd(), POLLIN, 0};
  ASSERT_EQ(::poll(&out, 1, 30000), 1);
  char buf[64] = {};
  ASSERT_GT(::read(p.outputFd(), buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::stoi(buf), p.pid());
  EXPECT_EQ(::getpgid(p.pid()), p.pid());
  p.signal(SIGTERM);
  ASSERT_TRUE(p.waitFor(30.0));
  EXPECT_EQ(p.poll().describe(), "exit code 7");
}

// A worker's children do not outlive it: what it leaves behind when it exits is killed before
// its status is passed on.
TEST(WorkerProcess, WhatAWorkerLeavesBehindDiesWithIt) {
  WorkerProcess p({"/bin/sh", "-c", "sleep 600 & echo $!"}, {});
  p.start();
  pollfd out{p.outputFd(), POLLIN, 0};
  ASSERT_EQ(::poll(&out, 1, 30000), 1);
  char buf[64] = {};
  ASSERT_GT(::read(p.outputFd(), buf, sizeof buf - 1), 0);
  const pid_t child = std::stoi(buf);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  ASSERT_TRUE(p.waitFor(30.0));
  EXPECT_EQ(p.poll().describe(), "exit code 0");
  if (pidfd >= 0) {  // else it was gone already
    pollfd gone{pidfd, POLLIN, 0};
    EXPECT_EQ(::poll(&gone, 1, 0), 1) << "the worker's child " << child << " is still running";
    ::close(pidfd);
  }
  ::kill(child, SIGKILL);
}

}  // namespace
}  // namespace cumulus::launch
