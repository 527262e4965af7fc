// The agent's own lines, exactly: users read them and scripts match them. (The lines that follow
// a restart decision are checked beside the policy, in restart_policy_test.cc.)

#include "launch/agent_console.h"
#include "tests/launch/console_capture.h"

#include <signal.h>
#include <stdio.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

namespace cumulus::launch {
namespace {

TEST(AgentConsole, PreemptionVerdicts) {
  EXPECT_EQ(printed([](AgentConsole& c) { c.finishedBeforePreemption(); }),
            "cumulus-run: the workers finished before they could be preempted\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.finishedAfterLeaving("1, 3", 2); }),
            "cumulus-run: rank(s) 1, 3 stopped at a preemption notice (exit 75) and the other 2 "
            "worker(s) finished training\n");
  EXPECT_EQ(printed([](AgentConsole& c) {
              c.preempted("preempted at step 7, checkpoint /ck/step-00000007", 1.234);
            }),
            "cumulus-run: preempted at step 7, checkpoint /ck/step-00000007 (notice to exit "
            "1.23 s); launch the same command again to resume\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.preemptedAndKilled(30); }),
            "cumulus-run: preempted, but the workers had not exited after the 30.0 s grace and "
            "were killed; the newest valid checkpoint is the one before\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.preemptedBeforeCheckpoint(1, "signal SIGTERM", 0.5); }),
            "cumulus-run: preempted before the workers could checkpoint (rank 1: signal SIGTERM; "
            "notice to exit 0.50 s); the next launch resumes from the newest valid checkpoint\n");
}

TEST(AgentConsole, NoticesAndSignals) {
  EXPECT_EQ(printed([](AgentConsole& c) { c.preemptionNotice("", 30); }),
            "cumulus-run: preemption notice (SIGTERM); asking the workers to checkpoint and stop "
            "within 30.0 s\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.preemptionNotice("file /tmp/notice", 5); }),
            "cumulus-run: preemption notice (file /tmp/notice); asking the workers to checkpoint "
            "and stop within 5.0 s\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.stoppingOnSignal(SIGINT); }),
            "cumulus-run: received SIGINT, stopping workers\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.noticeWarning("a warning, as it is"); }),
            "a warning, as it is\n");
}

TEST(AgentConsole, TheEndOfARoundSaysHowWithNodeZerosCode) {
  EXPECT_EQ(printed([](AgentConsole& c) { c.roundEnded(0, "the job ended"); }),
            "cumulus-run: done: the job ended\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.roundEnded(75, "the job ended"); }),
            "cumulus-run: preempted: the job ended\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.roundEnded(1, "only 1 node(s) joined"); }),
            "cumulus-run: giving up: only 1 node(s) joined\n");
}

}  // namespace
}  // namespace cumulus::launch
