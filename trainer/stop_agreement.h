#pragma once
// StopAgreement: the step loop's part that settles, with every other rank, what happens after a
// step (DESIGN.md "Failures, preemption and membership", step 2): go on, checkpoint and go on, or
// checkpoint and stop. No LibTorch here.
//
// Contract with the step loop (trainer.h):
//   - start() once, before the first step.
//   - decide(steps_done) at each step boundary but the run's last, on every rank, after step
//     `steps_done` is complete and a scheduled checkpoint of it was handed over; every rank calls
//     with the same sequence of steps and must get the same answer (an implementation that
//     consults the other ranks does so with one collective per call, in that same order).
//   - After kStop the loop checkpoints that step (rank 0), calls waitForAll() on every rank, and
//     returns a preempted RunResult; decide() is not called again.
// Called from the training thread only. An exception (a failed collective) ends run() with it.
//
// The default is PreemptionWatcher (preemption.h): a notice (SIGTERM, notify()) on any rank stops
// all of them after the same step, a checkpoint request (SIGUSR1, requestCheckpoint()) makes all
// of them checkpoint. A caller may hold its own StopAgreement, or wrap the default
// (TrainerOptions::stop), for instance to stop at a chosen step in a test.

#include <cstdint>

namespace cumulus::trainer {

// What every rank does after a step, by agreement.
enum class StepAction {
  kContinue,
  kCheckpoint,  // checkpoint this step, then go on
  kStop,        // checkpoint this step, then exit kExitPreempted
};

class StopAgreement {
 public:
  virtual ~StopAgreement() = default;
  // Before the first step (the default starts its deadline watchdog there).
  virtual void start() {}
  // After step `steps_done` (>= 1) completed; blocks for the agreement.
  virtual StepAction decide(int64_t steps_done) = 0;
  // Blocks until every rank has called it: after a stop, no rank exits before rank 0's
  // checkpoint is durable.
  virtual void waitForAll() = 0;
};

}  // namespace cumulus::trainer
