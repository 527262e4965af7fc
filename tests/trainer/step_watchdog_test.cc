// StepWatchdog (<cumulus/step_watchdog.h>): the timeout rule, the marks read against an injected
// clock, and the thread that reports a stall. That it prints and exits 2 is tested on a real
// cumulus-train in user_models_test.cc.
#include "cumulus/step_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>

namespace cumulus {
namespace {

TEST(StepTimeoutRuleTest, AConfiguredTimeoutIsKeptWhateverTheSteps) {
  StepTimeoutRule rule(2);
  EXPECT_FALSE(rule.automatic());
  EXPECT_EQ(rule.seconds(), 2);
  for (int i = 0; i < 50; ++i) rule.stepTook(100);
  EXPECT_EQ(rule.seconds(), 2);
}

TEST(StepTimeoutRuleTest, AutomaticIsTheFloorUntilAStepAfterTheWarmUp) {
  StepTimeoutRule rule;
  EXPECT_TRUE(rule.automatic());
  EXPECT_EQ(rule.seconds(), 300);
  // The warm-up's steps (one-time costs: allocation, connections, TorchScript profiling) are
  // not counted, however long they take.
  for (int i = 0; i < StepTimeoutRule::kWarmupSteps; ++i) rule.stepTook(1000);
  EXPECT_EQ(rule.medianStepSeconds(), std::nullopt);
  EXPECT_EQ(rule.seconds(), 300);
  rule.stepTook(40);
  EXPECT_EQ(rule.medianStepSeconds(), 40);
  EXPECT_EQ(rule.seconds(), 400);
}

TEST(StepTimeoutRuleTest, AutomaticIsTenTimesTheMedianButNeverUnderTheFloor) {
  StepTimeoutRule rule;
  for (int i = 0; i < StepTimeoutRule::kWarmupSteps; ++i) rule.stepTook(0);
  // 1 s steps and one 500 s outlier: the median ignores the outlier.
  for (double s : {1.0, 500.0, 1.0, 2.0}) rule.stepTook(s);
  EXPECT_EQ(rule.medianStepSeconds(), 1.5);  // even count: the mean of the middle two
  EXPECT_EQ(rule.seconds(), 300);
  rule.stepTook(60);
  EXPECT_EQ(rule.medianStepSeconds(), 2);
  EXPECT_EQ(rule.seconds(), 300);
}

TEST(StepTimeoutRuleTest, TheMedianIsOfTheLatestHundredSteps) {
  StepTimeoutRule rule;
  for (int i = 0; i < StepTimeoutRule::kWarmupSteps; ++i) rule.stepTook(0);
  for (size_t i = 0; i < StepTimeoutRule::kWindowSteps; ++i) rule.stepTook(1);
  EXPECT_EQ(rule.medianStepSeconds(), 1);
  // The steps slow down to 50 s: once they are most of the window, the timeout follows.
  for (size_t i = 0; i < StepTimeoutRule::kWindowSteps / 2 + 1; ++i) rule.stepTook(50);
  EXPECT_EQ(rule.medianStepSeconds(), 50);
  EXPECT_EQ(rule.seconds(), 500);
}

TEST(StepTimeoutRuleTest, ANegativeTimeoutIsRefused) {
  EXPECT_THROW(StepTimeoutRule(-1), std::invalid_argument);
}

// A clock the test moves; read from the watchdog thread too.
struct TestClock {
  std::atomic<double> now{1000};
  std::function<double()> fn() {
    return [this] { return now.load(); };
  }
};

TEST(StepWatchdogTest, APhaseWithoutProgressForLongerThanTheTimeoutIsAStall) {
  TestClock clock;
  StepWatchdogOptions options;
  options.timeout_seconds = 2;
  options.clock = clock.fn();
  StepWatchdog watchdog(options);
  EXPECT_EQ(watchdog.stalled(), std::nullopt);  // no step yet: nothing is watched
  watchdog.beginStep(3, 1);
  clock.now = 1001.5;
  watchdog.mark(StepPhase::kForward);  // progress: the clock of the phase starts again
  clock.now = 1003.5;
  EXPECT_EQ(watchdog.stalled(), std::nullopt);  // exactly the timeout: not yet
  clock.now = 1003.6;
  const std::optional<StepStall> stall = watchdog.stalled();
  ASSERT_TRUE(stall.has_value());
  EXPECT_EQ(stall->rank, 1);
  EXPECT_EQ(stall->step, 3);
  EXPECT_EQ(stall->phase, StepPhase::kForward);
  EXPECT_EQ(stallMessage(*stall),
            "rank 1: step 3 made no progress in forward for 2 s (trainer.step_timeout_seconds); "
            "a step that hangs hangs again when retried, so the job stops: look for an endless "
            "loop or a blocking call in forward, or raise trainer.step_timeout_seconds");
}

TEST(StepWatchdogTest, NothingIsWatchedBetweenSteps) {
  TestClock clock;
  StepWatchdogOptions options;
  options.timeout_seconds = 2;
  options.clock = clock.fn();
  StepWatchdog watchdog(options);
  watchdog.beginStep(1, 0);
  watchdog.mark(StepPhase::kOptimizer);
  watchdog.endStep();
  clock.now = 5000;  // a long evaluation or checkpoint
  EXPECT_EQ(watchdog.stalled(), std::nullopt);
  watchdog.beginStep(2, 0);
  watchdog.idle();  // a step given up (an exception)
  clock.now = 9000;
  EXPECT_EQ(watchdog.stalled(), std::nullopt);
}

TEST(StepWatchdogTest, TheAutomaticTimeoutFollowsTheStepsTheLoopReports) {
  TestClock clock;
  StepWatchdogOptions options;
  options.clock = clock.fn();
  StepWatchdog watchdog(options);
  for (int step = 1; step <= StepTimeoutRule::kWarmupSteps + 1; ++step) {
    watchdog.beginStep(step, 0);
    clock.now = clock.now + 40;  // each step takes 40 s
    watchdog.endStep();
  }
  EXPECT_EQ(watchdog.timeoutSeconds(), 400);
  watchdog.beginStep(7, 0);
  watchdog.mark(StepPhase::kBackward);
  clock.now = clock.now + 401;
  const std::optional<StepStall> stall = watchdog.stalled();
  ASSERT_TRUE(stall.has_value());
  EXPECT_EQ(stallMessage(*stall),
            "rank 0: step 7 made no progress in backward for 400 s (trainer.step_timeout_seconds "
            "0: automatic, 300 s or 10 x the median step of 40 s, whichever is longer); a step "
            "that hangs hangs again when retried, so the job stops: look for an endless loop or a "
            "blocking call in backward, or raise trainer.step_timeout_seconds");
}

// A rank in sync waits for a peer: the peer's own watchdog, which names the rank that hangs, gets
// kSyncGraceSeconds to speak first.
TEST(StepWatchdogTest, SyncWaitsLongerSoThatAPeerThatHangsIsNamedFirst) {
  TestClock clock;
  StepWatchdogOptions options;
  options.timeout_seconds = 2;
  options.clock = clock.fn();
  StepWatchdog watchdog(options);
  watchdog.beginStep(3, 1);
  watchdog.mark(StepPhase::kSync);
  clock.now = clock.now + 2 + kSyncGraceSeconds;
  EXPECT_EQ(watchdog.stalled(), std::nullopt);
  clock.now = clock.now + 0.5;
  const std::optional<StepStall> stall = watchdog.stalled();
  ASSERT_TRUE(stall.has_value());
  EXPECT_EQ(stallMessage(*stall),
            "rank 1: step 3 made no progress in sync for 17 s (trainer.step_timeout_seconds, and "
            "15 s more in sync, so that a peer that hangs is named by its own watchdog first); a "
            "step that hangs hangs again when retried, so the job stops: look for an endless loop "
            "or a blocking call in sync, or raise trainer.step_timeout_seconds");
}

// The thread looks by itself: the test only moves the clock and waits for the report.
TEST(StepWatchdogTest, TheThreadReportsAStall) {
  TestClock clock;
  std::promise<StepStall> reported;
  StepWatchdogOptions options;
  options.timeout_seconds = 0.5;
  options.clock = clock.fn();
  options.on_stall = [&](const StepStall& stall) { reported.set_value(stall); };
  StepWatchdog watchdog(options);
  watchdog.start();
  watchdog.beginStep(4, 2);
  watchdog.mark(StepPhase::kBackward);
  clock.now = clock.now + 0.6;
  std::future<StepStall> stall = reported.get_future();
  ASSERT_EQ(stall.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const StepStall s = stall.get();
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.step, 4);
  EXPECT_EQ(s.phase, StepPhase::kBackward);
}

TEST(StepWatchdogTest, PhasesHaveNames) {
  EXPECT_STREQ(stepPhaseName(StepPhase::kData), "data");
  EXPECT_STREQ(stepPhaseName(StepPhase::kForward), "forward");
  EXPECT_STREQ(stepPhaseName(StepPhase::kBackward), "backward");
  EXPECT_STREQ(stepPhaseName(StepPhase::kSync), "sync");
  EXPECT_STREQ(stepPhaseName(StepPhase::kOptimizer), "optimizer");
}

}  // namespace
}  // namespace cumulus
