#pragma once
// CheckpointPolicy: the step loop's part that decides when this rank checkpoints, and how: on the
// schedule (checkpoint.every_steps / every_seconds, and the run's last step), when the ranks agreed
// on a requested checkpoint, and at an agreed stop. It only decides; the loop takes the snapshot
// and hands it to Checkpoints (<cumulus/checkpoint.h>). No LibTorch here.
//
// Call order at each step boundary, after step `steps_done` completed (training thread only):
//   atStepEnd(steps_done, last)            -> a checkpoint the schedule wants
//   [if not last] afterAgreement(steps_done, the StopAgreement's action)
//   after each save the loop attempted: saveAttempted(steps_done, succeeded)
// Only the writing rank saves (the replicas are identical): a policy answers kNone on the others.
// Decisions may depend on this rank's clock, so they must never decide a collective.

#include <cstdint>
#include <functional>

#include "checkpoint/checkpoint_schedule.h"
#include "cumulus/preemption.h"

namespace cumulus::trainer {

struct CheckpointDecision {
  enum class Kind {
    kNone,
    kSave,            // snapshot this step; write it in the background if `background`
    kWaitForPending,  // this step is already saved: wait until its write is durable
  };
  Kind kind = Kind::kNone;
  bool background = false;  // kSave: the write may go on while training does
  bool preempted = false;   // kSave: the snapshot marks an agreed stop

  bool operator==(const CheckpointDecision& o) const {
    return kind == o.kind && background == o.background && preempted == o.preempted;
  }
};

class CheckpointPolicy {
 public:
  virtual ~CheckpointPolicy() = default;
  // After step `steps_done`; `last`: it was the run's final step.
  virtual CheckpointDecision atStepEnd(int64_t steps_done, bool last) = 0;
  // After the ranks agreed on `action` for step `steps_done` (never called after the last step).
  virtual CheckpointDecision afterAgreement(int64_t steps_done, StepAction action) = 0;
  // The loop tried to save step `steps_done` (a kSave decision); `succeeded`: the checkpoint was
  // handed over (written, or being written in the background) rather than failing.
  virtual void saveAttempted(int64_t steps_done, bool succeeded) = 0;
};

// The default: the schedule of the experiment's checkpoint section, on the writing rank.
//   - On schedule: when the schedule is enabled and due, or at the last step (so a finished run can
//     be extended from its end, optimizer state included); in the background when `background`.
//   - Requested (kCheckpoint): unless this step was just saved.
//   - Stop (kStop): a blocking, preempted snapshot, or, if this step was just saved, a wait for
//     that write.
// An attempted save restarts the schedule's timer, failed or not; a failed one is tried again by a
// request or a stop at the same step.
class ScheduledCheckpointPolicy final : public CheckpointPolicy {
 public:
  // `writer`: this rank saves (rank 0, with outputs on); `background`: checkpoint.async.
  ScheduledCheckpointPolicy(checkpoint::CheckpointSchedule schedule, bool writer, bool background);

  CheckpointDecision atStepEnd(int64_t steps_done, bool last) override;
  CheckpointDecision afterAgreement(int64_t steps_done, StepAction action) override;
  void saveAttempted(int64_t steps_done, bool succeeded) override;

 private:
  CheckpointDecision save(bool preempted) const;

  checkpoint::CheckpointSchedule schedule_;
  bool writer_;
  bool background_;
  int64_t saved_step_ = -1;  // the newest step handed to the checkpoint manager
};

}  // namespace cumulus::trainer
