#include "trainer/checkpoint_policy.h"

#include <utility>

namespace cumulus::trainer {

ScheduledCheckpointPolicy::ScheduledCheckpointPolicy(checkpoint::CheckpointSchedule schedule,
                                                     bool writer, bool background)
    : schedule_(std::move(schedule)), writer_(writer), background_(background) {}

CheckpointDecision ScheduledCheckpointPolicy::save(bool preempted) const {
  CheckpointDecision d;
  d.kind = CheckpointDecision::Kind::kSave;
  // A stop's checkpoint must be durable before the ranks exit.
  d.background = background_ && !preempted;
  d.preempted = preempted;
  return d;
}

CheckpointDecision ScheduledCheckpointPolicy::atStepEnd(int64_t steps_done, bool last) {
  if (!writer_ || !schedule_.enabled()) return {};
  if (last || schedule_.due(steps_done)) return save(false);
  return {};
}

CheckpointDecision ScheduledCheckpointPolicy::afterAgreement(int64_t steps_done,
                                                             StepAction action) {
  if (!writer_) return {};
  switch (action) {
    case StepAction::kContinue:
      return {};
    case StepAction::kCheckpoint:
      // A rebalance recommendation: the instance may go soon, so save now, then train on.
      return saved_step_ == steps_done ? CheckpointDecision{} : save(false);
    case StepAction::kStop:
      if (saved_step_ == steps_done) {
        CheckpointDecision d;
        d.kind = CheckpointDecision::Kind::kWaitForPending;
        return d;
      }
      return save(true);
  }
  return {};
}

void ScheduledCheckpointPolicy::saveAttempted(int64_t steps_done, bool succeeded) {
  if (succeeded) saved_step_ = steps_done;
  schedule_.markSaved();
}

}  // namespace cumulus::trainer
