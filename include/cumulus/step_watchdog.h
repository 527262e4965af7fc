#pragma once
// <cumulus/step_watchdog.h>: ends a process whose training step makes no progress (a model that
// loops forever in forward, a read that never returns), instead of letting the job hang. No
// LibTorch here.
//
// The training thread says where it is: beginStep(step, rank) at the start of each step (phase
// data), mark(phase) as the step moves on (forward, backward, sync, optimizer), endStep() when
// the step is done. Between steps (evaluation, checkpoints, the ranks' agreements, a re-forming)
// nothing is watched: those take as long as they need, and their collectives have timeouts of
// their own. Each call is one clock read and a few relaxed atomic stores: no lock, no syscall.
//
// A watchdog thread (start()) looks every timeout / 20 (at least 10 ms, at most 1 s). When the
// current phase has had no new mark for longer than the timeout it writes one line to stderr,
//   "<program>: error: rank 0: step 3 made no progress in forward for 2 s (...)",
// flushes stdout if no other thread holds it, and calls _exit(exit_code): the stuck thread cannot
// be unwound, so no destructor runs and no checkpoint is written (the newest one stays valid).
// exit_code is 2 by default: a step that hangs hangs again on a retry (cumulus-run ends the job).
//
// A rank in sync waits for its peers: when one of them is stuck in its own forward, that peer's
// watchdog must be the one to speak, naming the rank that hangs, not the ones waiting for it. So
// the sync phase gets kSyncGraceSeconds more than the others (the launcher ends the whole job
// within seconds of the first rank's exit 2), and its message says so.
//
// The timeout (StepTimeoutRule): a configured number of seconds > 0, or 0 for automatic:
// max(300 s, 10 x the median duration of this launch's latest 100 steps, not counting its first
// 5), which is 300 s until the 6th step has completed.
//
// A program of its own:
//   cumulus::StepWatchdog watchdog({/*timeout_seconds=*/0});
//   watchdog.start();
//   for (int64_t step = first; step < steps; ++step) {
//     watchdog.beginStep(step + 1, rank);          // loading the batch
//     watchdog.mark(cumulus::StepPhase::kForward);
//     ...
//     watchdog.endStep();
//   }
//
// Thread-safety: beginStep, mark, endStep and idle are for one thread (the training thread);
// stalled() and timeoutSeconds() may be called from any thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cumulus {

enum class StepPhase : uint8_t { kIdle, kData, kForward, kBackward, kSync, kOptimizer };

// "idle", "data", "forward", "backward", "sync", "optimizer".
const char* stepPhaseName(StepPhase phase);

// How long a step phase may go without progress. Pure: the caller passes each step's duration.
class StepTimeoutRule {
 public:
  static constexpr double kFloorSeconds = 300;
  static constexpr double kMedianFactor = 10;
  static constexpr int64_t kWarmupSteps = 5;
  static constexpr size_t kWindowSteps = 100;

  // configured_seconds > 0: that, always; 0: automatic (see the top of this file). Throws
  // std::invalid_argument for a negative or non-finite value.
  explicit StepTimeoutRule(double configured_seconds = 0);
  void stepTook(double seconds);
  double seconds() const;
  bool automatic() const { return configured_ == 0; }
  // Of the steps in the window; none during the warm-up.
  std::optional<double> medianStepSeconds() const;

 private:
  double configured_;
  int64_t steps_ = 0;
  std::vector<double> window_;  // a ring of the latest step durations after the warm-up
  size_t next_ = 0;
};

// What the watchdog found.
struct StepStall {
  int64_t rank = 0;
  int64_t step = 0;  // as beginStep was told
  StepPhase phase = StepPhase::kIdle;
  double timeout_seconds = 0;                 // the step timeout
  double grace_seconds = 0;                   // more for this phase (sync: kSyncGraceSeconds)
  std::optional<double> median_step_seconds;  // automatic timeouts only
  bool automatic = false;
};

// How much longer than the step timeout a rank may wait for its peers in sync.
constexpr double kSyncGraceSeconds = 15;

// "rank 0: step 3 made no progress in forward for 2 s (trainer.step_timeout_seconds); a step that
// hangs hangs again when retried, so the job stops: look for an endless loop or a blocking call
// in forward, or raise trainer.step_timeout_seconds". An automatic timeout says how it was set.
std::string stallMessage(const StepStall& stall);

struct StepWatchdogOptions {
  double timeout_seconds = 0;             // StepTimeoutRule: > 0 fixed, 0 automatic
  std::string program = "cumulus-train";  // the first word of the error line
  int exit_code = 2;                      // kUserErrorExitCode (<cumulus/errors.h>)
  // Monotonic seconds; empty: CLOCK_MONOTONIC.
  std::function<double()> clock;
  // Called by the watchdog thread instead of printing and exiting (tests); it then stops looking.
  std::function<void(const StepStall&)> on_stall;
};

class StepWatchdog {
 public:
  explicit StepWatchdog(StepWatchdogOptions options = {});
  // Stops the watchdog thread (without exiting).
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  // Starts the watchdog thread. Idempotent.
  void start();
  // Step `step` (as people count it, from 1) of `rank` begins, in phase data (or `phase`).
  void beginStep(int64_t step, int64_t rank, StepPhase phase = StepPhase::kData);
  void mark(StepPhase phase);
  // The step is done: its duration feeds the automatic timeout, and nothing is watched until the
  // next beginStep.
  void endStep();
  // Nothing is watched until the next beginStep or mark, and no step is counted (a step given up
  // by an exception, say).
  void idle() { mark(StepPhase::kIdle); }

  double timeoutSeconds() const { return timeout_.load(std::memory_order_relaxed); }
  // The stall, if the current phase has gone without a mark for longer than the timeout now.
  std::optional<StepStall> stalled() const;

 private:
  double now() const;
  void watch();
  [[noreturn]] void die(const StepStall& stall) const;

  StepWatchdogOptions options_;
  StepTimeoutRule rule_;      // training thread only
  double step_started_ = -1;  // training thread only
  std::atomic<double> timeout_;
  std::atomic<double> since_{0};  // when the current phase was marked; stored before phase_
  std::atomic<StepPhase> phase_{StepPhase::kIdle};
  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> rank_{0};
  std::atomic<double> median_{-1};  // the rule's median step, -1: none yet

  std::mutex mutex_;  // for the thread's sleep only, never taken on the training thread's path
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cumulus
