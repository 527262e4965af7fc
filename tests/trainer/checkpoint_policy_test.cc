// ScheduledCheckpointPolicy: which step boundaries save, how, and on which rank.
#include "trainer/checkpoint_policy.h"

#include <gtest/gtest.h>

namespace cumulus::trainer {
namespace {

using Kind = CheckpointDecision::Kind;

CheckpointDecision none() { return {}; }
CheckpointDecision save(bool background, bool preempted = false) {
  CheckpointDecision d;
  d.kind = Kind::kSave;
  d.background = background;
  d.preempted = preempted;
  return d;
}
CheckpointDecision waitForPending() {
  CheckpointDecision d;
  d.kind = Kind::kWaitForPending;
  return d;
}

TEST(CheckpointPolicyTest, SavesOnTheStepScheduleAndAtTheLastStep) {
  ScheduledCheckpointPolicy policy(checkpoint::CheckpointSchedule(5, 0), /*writer=*/true,
                                   /*background=*/true);
  for (int64_t step = 1; step <= 12; ++step) {
    const bool last = step == 12;
    const CheckpointDecision d = policy.atStepEnd(step, last);
    if (step == 5 || step == 10 || last) {
      EXPECT_EQ(d, save(true)) << "step " << step;
      policy.saveAttempted(step, true);
    } else {
      EXPECT_EQ(d, none()) << "step " << step;
    }
  }
}

TEST(CheckpointPolicyTest, WithoutAScheduleOnlyAgreementsSave) {
  ScheduledCheckpointPolicy policy(checkpoint::CheckpointSchedule(0, 0), true, true);
  EXPECT_EQ(policy.atStepEnd(3, false), none());
  EXPECT_EQ(policy.atStepEnd(4, true), none());  // checkpoints off: not even the last step
  EXPECT_EQ(policy.afterAgreement(3, StepAction::kContinue), none());
  EXPECT_EQ(policy.afterAgreement(3, StepAction::kCheckpoint), save(true));
  EXPECT_EQ(policy.afterAgreement(3, StepAction::kStop), save(false, true));
}

TEST(CheckpointPolicyTest, OnlyTheWriterSaves) {
  ScheduledCheckpointPolicy policy(checkpoint::CheckpointSchedule(1, 0), /*writer=*/false, true);
  EXPECT_EQ(policy.atStepEnd(1, false), none());
  EXPECT_EQ(policy.atStepEnd(2, true), none());
  EXPECT_EQ(policy.afterAgreement(1, StepAction::kCheckpoint), none());
  EXPECT_EQ(policy.afterAgreement(1, StepAction::kStop), none());
}

TEST(CheckpointPolicyTest, AStepJustSavedIsNotSavedAgain) {
  ScheduledCheckpointPolicy policy(checkpoint::CheckpointSchedule(4, 0), true,
                                   /*background=*/false);
  ASSERT_EQ(policy.atStepEnd(4, false), save(false));
  policy.saveAttempted(4, true);
  // A request at the same step has its checkpoint; a stop waits for it to be durable.
  EXPECT_EQ(policy.afterAgreement(4, StepAction::kCheckpoint), none());
  EXPECT_EQ(policy.afterAgreement(4, StepAction::kStop), waitForPending());
  // At another step both save; the stop's snapshot is blocking and marked preempted.
  EXPECT_EQ(policy.afterAgreement(5, StepAction::kCheckpoint), save(false));
  EXPECT_EQ(policy.afterAgreement(5, StepAction::kStop), save(false, true));
}

TEST(CheckpointPolicyTest, AFailedSaveIsTriedAgainByARequestOrAStop) {
  ScheduledCheckpointPolicy policy(checkpoint::CheckpointSchedule(4, 0), true, true);
  ASSERT_EQ(policy.atStepEnd(4, false), save(true));
  policy.saveAttempted(4, /*succeeded=*/false);
  EXPECT_EQ(policy.afterAgreement(4, StepAction::kCheckpoint), save(true));
  EXPECT_EQ(policy.afterAgreement(4, StepAction::kStop), save(false, true));
}

TEST(CheckpointPolicyTest, TheTimeScheduleRestartsAtEachAttempt) {
  double now = 100;
  ScheduledCheckpointPolicy policy(checkpoint::CheckpointSchedule(0, 30, [&] { return now; }), true,
                                   true);
  now = 129;
  EXPECT_EQ(policy.atStepEnd(1, false), none());
  now = 130;
  ASSERT_EQ(policy.atStepEnd(2, false), save(true));
  policy.saveAttempted(2, /*succeeded=*/false);  // failed, but the timer restarts all the same
  now = 159;
  EXPECT_EQ(policy.atStepEnd(3, false), none());
  // A requested checkpoint restarts it too.
  ASSERT_EQ(policy.afterAgreement(3, StepAction::kCheckpoint), save(true));
  policy.saveAttempted(3, true);
  now = 188;
  EXPECT_EQ(policy.atStepEnd(4, false), none());
  now = 189;
  EXPECT_EQ(policy.atStepEnd(5, false), save(true));
}

}  // namespace
}  // namespace cumulus::trainer
