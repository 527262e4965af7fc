#pragma once
// <cumulus/preemption.h>: "should I stop after this step?", agreed by all ranks (a MAX
// all-reduce of one integer at each step boundary; docs/library.md). No LibTorch here.
//
// StopAgreement is the seam a step loop asks at every step boundary:
//   - start() once, before the first step.
//   - decide(steps_done) at each step boundary but the run's last, on every rank, after step
//     `steps_done` is complete (and a scheduled checkpoint of it was handed over); every rank
//     calls with the same sequence of steps and gets the same answer: go on, checkpoint and go
//     on, or checkpoint and stop.
//   - After kStop: rank 0 checkpoints that step, every rank calls waitForAll() (so no rank exits
//     before the checkpoint is durable), and the program exits kExitPreempted (75); cumulus-run
//     relaunches it without counting a restart, and the relaunch resumes from the checkpoint.
// Called from the training thread only. An exception (a failed collective) is the caller's.
//
// PreemptionWatcher is the default. The notice is a SIGTERM (cumulus-run forwards its own, and the
// cloud's notices it polls) or a call to notify(); a checkpoint request (an AWS rebalance
// recommendation) is a SIGUSR1 (cumulus-run sends it) or requestCheckpoint(). Each decide(step)
// contributes one integer to a MAX all-reduce: -1 when this rank has seen neither, otherwise
// 4·step + level, where level is 2 for a notice and 1 for a pending checkpoint request. Every rank
// calls with the same step, so the MAX carries the strongest level any rank saw, and every rank
// stops (or checkpoints) after this same step: no rank runs a step whose gradient a stopped peer
// would never send. The cost is one 8-byte all-reduce per step (tens of microseconds on loopback;
// nothing in a group of one).
//
// The deadline: a watchdog thread (start(), startWatchdog()) notices the notice too (it polls
// every 10 ms) and, if the process is still alive `grace_seconds` after it, writes one line to
// stderr and calls _exit(exit_code). A checkpoint write that hangs (a dead peer, a stuck file
// system) cannot outlive the cloud's grace period; its step-N.tmp/ directory is not a checkpoint,
// and the previous valid one is what a resume finds.
//
// A program of its own:
//   cumulus::installSigtermHandler();            // in main, before starting threads
//   cumulus::installCheckpointSignalHandler();
//   cumulus::PreemptionWatcher preemption(cumulus::agreeOver(*group));
//   preemption.start();
//   for (int64_t step = first; step < steps; ++step) {
//     ... train step step + 1 ...
//     cumulus::StepAction action = step + 1 < steps ? preemption.decide(step + 1)
//                                                   : cumulus::StepAction::kContinue;
//     if (action != cumulus::StepAction::kContinue || due) { rank 0 saves a checkpoint }
//     if (action == cumulus::StepAction::kStop) {
//       preemption.waitForAll();
//       return cumulus::kExitPreempted;
//     }
//   }
//
// Thread-safety: notify(), noticed() and the signal handlers may be called from any thread (or
// signal context), and so may requestCheckpoint(). decide() is for the training thread only.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "cumulus/errors.h"
#include "cumulus/options.h"  // kDefaultPreemptionGraceSeconds

namespace cumulus {

class ProcessGroup;

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

// MAX of `value` over all ranks (every rank calls it in the same order). World size 1: identity.
using AgreeMax = std::function<int64_t(int64_t value)>;
inline AgreeMax agreeAlone() {
  return [](int64_t value) { return value; };
}

// Installs a process-wide SIGTERM handler that only records the notice (an async-signal-safe
// store to a lock-free atomic and clock_gettime). Idempotent. The process state is inherently
// global (a signal disposition is); watchers read it through sigtermReceived().
void installSigtermHandler();
// True once a SIGTERM arrived after installSigtermHandler().
bool sigtermReceived();
// Forget a received SIGTERM (tests run several watchers in one process).
void resetSigtermForTesting();

// Installs a process-wide SIGUSR1 handler that counts checkpoint requests, then unblocks SIGUSR1
// in the calling thread (cumulus-run starts its workers with it blocked, so a program that does
// not call this never dies of it). Call it before starting threads. Idempotent.
void installCheckpointSignalHandler();
// SIGUSR1s received since installCheckpointSignalHandler().
uint64_t checkpointSignalsReceived();
// Forget the SIGUSR1s received so far (tests raise them in a process that goes on).
void resetCheckpointSignalsForTesting();

struct PreemptionOptions {
  double grace_seconds =
      kDefaultPreemptionGraceSeconds;  // notice -> forced exit; <= 0: no watchdog
  int exit_code = kExitPreempted;
  bool watch_sigterm = true;  // also count a SIGTERM (installSigtermHandler) as the notice
  // Also count a SIGUSR1 (installCheckpointSignalHandler) as a checkpoint request.
  bool watch_sigusr1 = true;
  // Monotonic seconds; empty: CLOCK_MONOTONIC. Used for notice timestamps, not by the watchdog.
  std::function<double()> clock;
};

// The default StopAgreement: decide() as below, start() starts the
// watchdog, waitForAll() is one more agreement round.
class PreemptionWatcher : public StopAgreement {
 public:
  PreemptionWatcher(AgreeMax agree, PreemptionOptions options = {});
  // Stops the watchdog thread (without exiting).
  ~PreemptionWatcher() override;
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  // Records a notice (idempotent; the first one's time is kept).
  void notify();
  // Asks for a checkpoint at the next step boundary (thread-safe). Requests that arrive before
  // one agreement round are answered by one checkpoint.
  void requestCheckpoint();
  // This rank has seen a notice (notify() or, with watch_sigterm, a SIGTERM).
  bool noticed() const;
  // Seconds since this rank saw the notice, or none. A SIGTERM's time is that of the watcher's
  // first look after it (decide, noticed, or the watchdog's 10 ms poll).
  std::optional<double> secondsSinceNotice() const;

  // One agreement round after step `step` (>= 0) completed. kStop: every rank must stop now;
  // then stopStep() == step, and later calls return kStop without communicating. kCheckpoint:
  // every rank checkpoints this step and goes on; the requests seen so far are answered.
  // Propagates the agree callback's exception (a communicator error).
  StepAction decide(int64_t step) override;
  std::optional<int64_t> stopStep() const;
  void start() override { startWatchdog(); }
  void waitForAll() override { agree_(0); }

  // Starts the deadline watchdog (see above). Idempotent; no-op when grace_seconds <= 0.
  void startWatchdog();
  // How many times the watchdog has looked for the notice and its deadline so far (0 before
  // startWatchdog). Never blocks. Lets an observer tell "the watchdog looked and did nothing" from
  // "the watchdog has not run yet".
  int64_t watchdogLooks() const { return watchdog_looks_.load(); }

 private:
  double now() const;
  void watchdogLoop();

  AgreeMax agree_;
  PreemptionOptions options_;
  std::atomic<bool> notified_{false};
  mutable std::atomic<double> notice_time_{-1.0};  // now() at the first sighting of the notice
  std::optional<int64_t> stop_step_;               // training thread only
  std::atomic<uint64_t> checkpoint_requests_{0};   // requestCheckpoint() calls
  uint64_t requests_answered_ = 0;                 // training thread only
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> watchdog_looks_{0};
  std::thread watchdog_;
};

// The MAX over `group`'s ranks (one 8-byte all-reduce with the tree algorithm, fixed, so it never
// goes through the funnel's parameter server); the identity in a group of one. `group` must
// outlive the result.
AgreeMax agreeOver(ProcessGroup& group);

}  // namespace cumulus
