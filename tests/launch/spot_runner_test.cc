// runSpot against a shell job that behaves like a resumable trainer: it counts steps in a state
// file, appends the trainer's records to a metrics.jsonl, and on SIGTERM "checkpoints" and exits
// 75.
#include "launch/spot_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "base/command_line.h"
#include "tests/test_support.h"

namespace cumulus::launch {
namespace {

using cumulus::testing::TempDir;

// Steps of 20 ms up to 30, each with a train record in dir/metrics.jsonl as cumulus-train writes
// them; a checkpoint (the state file) every 5 steps, and one at the agreed stop when
// `trap_term`; otherwise SIGTERM is ignored and the kill loses the steps since. The state file is
// replaced whole (a SIGKILL mid-write must not leave it empty), after the step's train record: a
// kill in between loses that step's checkpoint, as it would a real trainer's. Its console says
// nothing cumulus-spot reads.
std::vector<std::string> fakeJob(const std::string& dir, bool trap_term) {
  std::ostringstream s;
  // The notice is caught first of all, as cumulus-train does: one that comes while the job starts
  // (a launch's notice can follow its start by a few ms) stops it at the step it resumed.
  s << "trap 'term=1' TERM; "
    << "d=" << dir << "; s=$(cat $d/state 2>/dev/null || echo 0); "
    << R"(m() { echo "{\"type\":\"$1\",\"step\":$2$3,\"time\":$(date +%s.%N)}" >> $d/metrics.jsonl; }; )"
    << "[ $s -gt 0 ] && m resume $s; "
    << "save() { echo $1 > $d/state.tmp && mv $d/state.tmp $d/state; }; "
    << (trap_term ? "stop() { save $s; m preempted $s; echo stopping; exit 75; }; trap stop TERM; "
                    "[ -n \"$term\" ] && stop; "
                  : "trap '' TERM; ")
    << "first=1; while [ $s -lt 30 ]; do sleep 0.02; s=$((s+1)); "
    << "[ $first = 1 ] && m first_step $s && first=0; "
    << "m train $s; echo \"at $s\"; "
    << "[ $((s % 5)) = 0 ] && save $s && m checkpoint $s ',\"stall_ms\":0.5'; "
    << "done; echo \"world {world}\"; exit 0";
  return {"/bin/sh", "-c", s.str()};
}

TEST(SpotRunnerTest, CommandForWorldSize) {
  EXPECT_EQ(commandFor({"cumulus-run", "--", "cumulus-train", "x.yaml"}, 2),
            (std::vector<std::string>{"cumulus-run", "--nproc-per-node=2", "--", "cumulus-train",
                                      "x.yaml"}));
  EXPECT_EQ(commandFor({"/b/cumulus-run", "--", "t"}, 0),
            (std::vector<std::string>{"/b/cumulus-run", "--", "t"}));
  EXPECT_EQ(commandFor({"job", "--workers={world}"}, 3),
            (std::vector<std::string>{"job", "--workers=3"}));
  EXPECT_THROW(commandFor({"job"}, 3), std::invalid_argument);
  EXPECT_THROW(commandFor({}, 0), std::invalid_argument);
}

TEST(SpotRunnerTest, PreemptedJobResumesToTheEnd) {
  TempDir dir;
  SpotOptions options;
  options.trace.seed = 3;
  options.trace.mean_interval_s = 0.15;
  options.trace.notice_s = 2;
  options.trace.relaunch_delay_s = 0.05;
  options.trace.max_preemptions = 3;
  options.trace.world_sizes = {2, 1};
  options.command = fakeJob(dir.path(), true);
  options.metrics_path = dir.path() + "/metrics.jsonl";
  options.timeout_s = 30;
  std::ostringstream echo;
  options.echo = &echo;
  const SpotRun run = runSpot(options);
  ASSERT_EQ(run.records.size(), 4u) << echo.str();
  const SpotReport report = summarize(run.records, {});
  EXPECT_TRUE(report.completed) << echo.str();
  EXPECT_EQ(report.preemptions, 3);
  EXPECT_EQ(report.kills, 0);
  EXPECT_EQ(report.final_step, 30);
  EXPECT_EQ(report.steps_lost, 0);  // each stop checkpointed its step
  // Each launch resumes from the step the last clean stop checkpointed. Launch 1's notice comes
  // 37 ms after its start: on a busy machine that can be before the shell has set its trap, and
  // then SIGTERM ends it before it read its state or trained (as it would a trainer that had not
  // yet installed its handler); the next launch resumes from the same checkpoint.
  int64_t checkpointed = 0;
  for (size_t i = 0; i + 1 < run.records.size(); ++i) {
    const LaunchRecord& record = run.records[i];
    if (record.signal == SIGTERM) {
      EXPECT_EQ(record.max_step, 0) << i << echo.str();
      EXPECT_FALSE(record.preempted_step.has_value()) << i << echo.str();
    } else {
      EXPECT_EQ(record.resumed_from_step, checkpointed) << i << echo.str();
      ASSERT_TRUE(record.preempted_step.has_value()) << i << echo.str();
      EXPECT_EQ(record.exit_code, 75) << i;
      checkpointed = *record.preempted_step;
    }
  }
  EXPECT_EQ(run.records.back().resumed_from_step, checkpointed) << echo.str();
  EXPECT_NE(echo.str().find("[spot 3] world 1"), std::string::npos) << echo.str();  // {world}
  EXPECT_LT(report.notice_to_exit_max_s, 1.0);
}

TEST(SpotRunnerTest, JobIgnoringTheNoticeIsKilledAndLosesSteps) {
  TempDir dir;
  SpotOptions options;
  options.trace.seed = 0;  // notice at 0.28 s: mid-run (0.5648 x the mean)
  options.trace.mean_interval_s = 0.5;
  options.trace.notice_s = 0.1;
  options.trace.relaunch_delay_s = 0.0;
  options.trace.max_preemptions = 1;
  options.command = fakeJob(dir.path(), false);
  options.metrics_path = dir.path() + "/metrics.jsonl";
  options.timeout_s = 30;
  std::ostringstream echo;
  options.echo = &echo;
  const SpotRun run = runSpot(options);
  ASSERT_EQ(run.records.size(), 2u) << echo.str();
  EXPECT_TRUE(run.records[0].killed);
  EXPECT_EQ(run.records[0].signal, 9);
  const SpotReport report = summarize(run.records, {});
  EXPECT_TRUE(report.completed);
  EXPECT_EQ(report.kills, 1);
  EXPECT_EQ(report.final_step, 30);
  // Launch 1 resumes from launch 0's last checkpoint: the last multiple of 5 it reached, or the
  // one before when the kill fell between that step's train record and its checkpoint. Lost: the
  // steps past it.
  const int64_t reached = run.records[0].max_step;
  const int64_t resumed = run.records[1].resumed_from_step;
  EXPECT_EQ(resumed % 5, 0) << echo.str();
  EXPECT_TRUE(resumed == reached / 5 * 5 || (reached % 5 == 0 && resumed == reached - 5))
      << "reached " << reached << ", resumed from " << resumed;
  EXPECT_EQ(report.steps_lost, reached - resumed);
  EXPECT_GE(report.notice_to_exit_max_s, 0.1);
}

TEST(SpotRunnerTest, CrashesAreRelaunchedUpToTheLimit) {
  SpotOptions options;
  options.trace.mean_interval_s = 0;
  options.trace.relaunch_delay_s = 0;
  options.max_crashes = 2;
  options.command = {"/bin/sh", "-c", "exit 3"};
  const SpotRun run = runSpot(options);
  ASSERT_EQ(run.records.size(), 3u);
  EXPECT_EQ(run.records[2].exit_code, 3);
  EXPECT_EQ(summarize(run.records, {}).crashes, 3);
}

// --metrics naming a FIFO that no one writes: reading it after the launch waited in open(2) for a
// writer. It is refused at once, naming the flag and the path.
TEST(SpotRunnerTest, AMetricsFileThatIsAFifoIsRefused) {
  TempDir dir;
  const std::string fifo = dir.path() + "/metrics.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  SpotOptions options;
  options.trace.mean_interval_s = 0;
  options.trace.relaunch_delay_s = 0;
  options.command = {"/bin/true"};
  options.metrics_path = fifo;
  try {
    runSpot(options);
    ADD_FAILURE() << "no error";
  } catch (const base::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--metrics " + fifo + ": is a FIFO, not a regular file");
  }
}

TEST(SpotRunnerTest, NoticeFileInsteadOfSigterm) {
  TempDir dir;
  const std::string notice = dir.path() + "/notice";
  SpotOptions options;
  options.trace.mean_interval_s = 0.1;
  options.trace.max_preemptions = 1;
  options.trace.notice_s = 5;
  options.notice_file = notice;
  // The first launch polls the notice file and exits 75 when it appears (however late the
  // preemption comes on a busy machine: 60 s at most); the relaunch checks that it is gone
  // (exit 9 if not) and exits 0. A marker file tells the two apart.
  const std::string first = dir.path() + "/first";
  options.command = {"/bin/sh", "-c",
                     "if [ -e " + first + " ]; then [ -e " + notice + " ] && exit 9; exit 0; fi; " +
                         "touch " + first + "; for i in $(seq 1 6000); do [ -e " + notice +
                         " ] && exit 75; sleep 0.01; done; exit 0"};
  const SpotRun run = runSpot(options);
  ASSERT_EQ(run.records.size(), 2u);
  EXPECT_EQ(run.records[0].exit_code, 75);
  EXPECT_FALSE(run.records[0].killed);
  EXPECT_EQ(run.records[1].exit_code, 0);
  EXPECT_NE(::access(notice.c_str(), F_OK), 0);  // cleaned up
}

}  // namespace
}  // namespace cumulus::launch
