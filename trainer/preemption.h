#pragma once
// Turning a spot-preemption notice into "stop after an agreed step" (DESIGN.md "Preemption
// protocol", steps 2-3). No LibTorch here.
//
// The notice is a SIGTERM (the launcher forwards its own) or a call to notify(). Every rank calls
// shouldStop(step) once at each step boundary, after step `step` is complete, with the same
// sequence of steps. Each call contributes one integer to a MAX all-reduce through the `agree`
// callback: `step` if this rank has seen a notice, -1 otherwise. A result >= 0 means some rank was
// noticed by now, so every rank stops after this same step s* = the result (= `step`, because all
// ranks call with the same step): no rank runs a step whose gradient a stopped peer would never
// send. The cost is one 8-byte all-reduce per step (tens of microseconds on loopback; world size 1
// passes an identity callback and pays nothing).
//
// The deadline: a watchdog thread, started by startWatchdog(), notices the notice too (it polls
// every 10 ms) and, if the process is still alive `grace_seconds` after the notice, writes one line
// to stderr and calls _exit(exit_code). So a checkpoint write that hangs (a dead peer in the
// agreement, a stuck file system) cannot outlive the cloud's grace period; its step-N.tmp/
// directory is simply not a checkpoint and the previous valid one is what a resume finds.
//
// Thread-safety: notify(), noticed() and the signal handler may be called from any thread (or
// signal context). shouldStop() is for the training thread only.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

namespace cumulus::trainer {

// EX_TEMPFAIL: "preempted, resumable"; cumulus-run relaunches without using up --max-restarts.
inline constexpr int kExitPreempted = 75;
inline constexpr double kDefaultPreemptionGraceSeconds = 25.0;

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

struct PreemptionOptions {
  double grace_seconds =
      kDefaultPreemptionGraceSeconds;  // notice -> forced exit; <= 0: no watchdog
  int exit_code = kExitPreempted;
  bool watch_sigterm = true;  // also count a SIGTERM (installSigtermHandler) as the notice
  // Monotonic seconds; empty: CLOCK_MONOTONIC. Used for notice timestamps, not by the watchdog.
  std::function<double()> clock;
};

class PreemptionWatcher {
 public:
  PreemptionWatcher(AgreeMax agree, PreemptionOptions options = {});
  // Stops the watchdog thread (without exiting).
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  // Records a notice (idempotent; the first one's time is kept).
  void notify();
  // This rank has seen a notice (notify() or, with watch_sigterm, a SIGTERM).
  bool noticed() const;
  // Seconds since this rank saw the notice, or none. A SIGTERM's time is that of the watcher's
  // first look after it (shouldStop, noticed, or the watchdog's 10 ms poll).
  std::optional<double> secondsSinceNotice() const;

  // One agreement round after step `step` (>= 0) completed. Returns true when every rank must stop
  // now; then stopStep() == step. Once true, later calls return true without communicating.
  // Propagates the agree callback's exception (a communicator error).
  bool shouldStop(int64_t step);
  std::optional<int64_t> stopStep() const;

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
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> watchdog_looks_{0};
  std::thread watchdog_;
};

}  // namespace cumulus::trainer
