#pragma once
// Turning a spot-preemption notice into "stop after an agreed step" (DESIGN.md "Preemption
// protocol", steps 2-3), and a checkpoint request (an AWS rebalance recommendation) into
// "checkpoint after an agreed step, then go on". No LibTorch here.
//
// The notice is a SIGTERM (the launcher forwards its own) or a call to notify(); the checkpoint
// request a SIGUSR1 (the launcher sends it) or a call to requestCheckpoint(). Every rank calls
// decide(step) once at each step boundary, after step `step` is complete, with the same sequence
// of steps. Each call contributes one integer to a MAX all-reduce through the `agree` callback:
// -1 when this rank has seen neither, otherwise 4·step + level, where level is 2 for a notice and
// 1 for a pending checkpoint request. Since every rank calls with the same step, the MAX carries
// the strongest level any rank saw: a result >= 0 makes every rank stop (level 2) or checkpoint
// (level 1) after this same step, so no rank runs a step whose gradient a stopped peer would
// never send, and all ranks checkpoint the same state. The cost is one 8-byte all-reduce per step
// (tens of microseconds on loopback; world size 1 passes an identity callback and pays nothing).
//
// The deadline: a watchdog thread, started by startWatchdog(), notices the notice too (it polls
// every 10 ms) and, if the process is still alive `grace_seconds` after the notice, writes one line
// to stderr and calls _exit(exit_code). So a checkpoint write that hangs (a dead peer in the
// agreement, a stuck file system) cannot outlive the cloud's grace period; its step-N.tmp/
// directory is simply not a checkpoint and the previous valid one is what a resume finds.
//
// Thread-safety: notify(), noticed() and the signal handler may be called from any thread (or
// signal context), and so may requestCheckpoint(). decide() is for the training thread only.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "trainer/stop_agreement.h"

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

// The step loop's default StopAgreement (stop_agreement.h): decide() as below, start() starts the
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

}  // namespace cumulus::trainer
