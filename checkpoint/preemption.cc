#include "cumulus/preemption.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cassert>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace cumulus {
namespace {

// The signal handler can only reach process-wide state; lock-free atomics are async-signal-safe.
std::atomic<bool> g_sigterm{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void onSigterm(int) { g_sigterm.store(true, std::memory_order_relaxed); }

std::atomic<uint64_t> g_sigusr1{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

extern "C" void onSigusr1(int) { g_sigusr1.fetch_add(1, std::memory_order_relaxed); }

double monotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void installSigtermHandler() {
  struct sigaction action {};
  action.sa_handler = onSigterm;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a notice must not turn a blocking read of the data plane into EINTR errors.
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
}

void installCheckpointSignalHandler() {
  struct sigaction action {};
  action.sa_handler = onSigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  // A request sent while the mask still blocked it is delivered to the handler now.
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
}

uint64_t checkpointSignalsReceived() { return g_sigusr1.load(std::memory_order_relaxed); }

bool sigtermReceived() { return g_sigterm.load(std::memory_order_relaxed); }
void resetSigtermForTesting() { g_sigterm.store(false); }
void resetCheckpointSignalsForTesting() { g_sigusr1.store(0); }

PreemptionWatcher::PreemptionWatcher(AgreeMax agree, PreemptionOptions options)
    : agree_(std::move(agree)), options_(std::move(options)) {
  assert(agree_);
}

PreemptionWatcher::~PreemptionWatcher() {
  stopping_.store(true);
  if (watchdog_.joinable()) watchdog_.join();
}

double PreemptionWatcher::now() const {
  return options_.clock ? options_.clock() : monotonicSeconds();
}

void PreemptionWatcher::notify() {
  notified_.store(true);
  noticed();  // stamps the time
}

bool PreemptionWatcher::noticed() const {
  const bool seen = notified_.load() || (options_.watch_sigterm && sigtermReceived());
  if (seen) {
    double unset = -1.0;
    notice_time_.compare_exchange_strong(unset, now());
  }
  return seen;
}

std::optional<double> PreemptionWatcher::secondsSinceNotice() const {
  if (!noticed()) return std::nullopt;
  return now() - notice_time_.load();
}

void PreemptionWatcher::requestCheckpoint() { checkpoint_requests_.fetch_add(1); }

StepAction PreemptionWatcher::decide(int64_t step) {
  assert(step >= 0);
  if (stop_step_) return StepAction::kStop;
  constexpr int64_t kCheckpointLevel = 1;
  constexpr int64_t kStopLevel = 2;
  const uint64_t requests =
      checkpoint_requests_.load() + (options_.watch_sigusr1 ? checkpointSignalsReceived() : 0);
  const int64_t level = noticed()                       ? kStopLevel
                        : requests > requests_answered_ ? kCheckpointLevel
                                                        : 0;
  const int64_t agreed = agree_(level > 0 ? 4 * step + level : -1);
  if (agreed < 0) return StepAction::kContinue;
  // Every rank calls with the same step, so the max of the proposals is 4·step + the top level.
  assert(agreed / 4 == step && agreed % 4 >= kCheckpointLevel && agreed % 4 <= kStopLevel);
  requests_answered_ = requests;
  if (agreed % 4 == kCheckpointLevel) return StepAction::kCheckpoint;
  stop_step_ = step;
  // A rank that learns of the stop only through the agreement still owes the deadline.
  notified_.store(true);
  noticed();
  return StepAction::kStop;
}

std::optional<int64_t> PreemptionWatcher::stopStep() const { return stop_step_; }

void PreemptionWatcher::startWatchdog() {
  if (options_.grace_seconds <= 0 || watchdog_.joinable()) return;
  watchdog_ = std::thread([this] { watchdogLoop(); });
}

void PreemptionWatcher::watchdogLoop() {
  // Measured on CLOCK_MONOTONIC from this thread's own first sighting, so an injected test clock
  // cannot stall the deadline.
  double seen_at = -1;
  while (!stopping_.load()) {
    const double t = monotonicSeconds();
    if (seen_at < 0 && noticed()) seen_at = t;
    if (seen_at >= 0 && t - seen_at >= options_.grace_seconds) {
      char line[160];
      const int n =
          std::snprintf(line, sizeof line,
                        "cumulus-train: preemption grace of %.1f s ran out before this worker "
                        "could checkpoint and stop; exiting with code %d\n",
                        options_.grace_seconds, options_.exit_code);
      if (n > 0) {
        [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, line, static_cast<size_t>(n));
      }
      _exit(options_.exit_code);
    }
    watchdog_looks_++;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace cumulus
