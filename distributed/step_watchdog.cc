// The step watchdog (<cumulus/step_watchdog.h>): the timeout rule, the marks, and the thread that
// ends a process whose step stopped moving.
#include "cumulus/step_watchdog.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace cumulus {
namespace {

double monotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// "2", "300", "0.0125", "1200": a number of seconds as people write it.
std::string secondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, seconds >= 100 ? "%.0f" : "%.3g", seconds);
  return text;
}

}  // namespace

const char* stepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kIdle:
      return "idle";
    case StepPhase::kData:
      return "data";
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kSync:
      return "sync";
    case StepPhase::kOptimizer:
      return "optimizer";
  }
  return "unknown";
}

StepTimeoutRule::StepTimeoutRule(double configured_seconds) : configured_(configured_seconds) {
  if (!std::isfinite(configured_seconds) || configured_seconds < 0) {
    throw std::invalid_argument("step timeout: must be >= 0 seconds (0: automatic), got " +
                                std::to_string(configured_seconds));
  }
}

void StepTimeoutRule::stepTook(double seconds) {
  if (++steps_ <= kWarmupSteps) return;
  if (window_.size() < kWindowSteps) {
    window_.push_back(seconds);
    return;
  }
  window_[next_] = seconds;
  next_ = (next_ + 1) % kWindowSteps;
}

std::optional<double> StepTimeoutRule::medianStepSeconds() const {
  if (window_.empty()) return std::nullopt;
  std::vector<double> sorted = window_;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

double StepTimeoutRule::seconds() const {
  if (!automatic()) return configured_;
  const std::optional<double> median = medianStepSeconds();
  return median ? std::max(kFloorSeconds, kMedianFactor * *median) : kFloorSeconds;
}

std::string stallMessage(const StepStall& stall) {
  const std::string phase = stepPhaseName(stall.phase);
  std::string limit = "trainer.step_timeout_seconds";
  if (stall.automatic) {
    limit += " 0: automatic, " + secondsText(StepTimeoutRule::kFloorSeconds) + " s or " +
             secondsText(StepTimeoutRule::kMedianFactor) + " x the median step";
    if (stall.median_step_seconds) limit += " of " + secondsText(*stall.median_step_seconds) + " s";
    limit += ", whichever is longer";
  }
  if (stall.grace_seconds > 0) {
    limit += ", and " + secondsText(stall.grace_seconds) +
             " s more in sync, so that a peer that hangs is named by its own watchdog first";
  }
  return "rank " + std::to_string(stall.rank) + ": step " + std::to_string(stall.step) +
         " made no progress in " + phase + " for " +
         secondsText(stall.timeout_seconds + stall.grace_seconds) + " s (" + limit +
         "); a step that hangs hangs again when retried, so the job stops: look for an endless "
         "loop or a blocking call in " +
         phase + ", or raise trainer.step_timeout_seconds";
}

StepWatchdog::StepWatchdog(StepWatchdogOptions options)
    : options_(std::move(options)), rule_(options_.timeout_seconds), timeout_(rule_.seconds()) {}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double StepWatchdog::now() const { return options_.clock ? options_.clock() : monotonicSeconds(); }

void StepWatchdog::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { watch(); });
}

void StepWatchdog::beginStep(int64_t step, int64_t rank, StepPhase phase) {
  step_.store(step, std::memory_order_relaxed);
  rank_.store(rank, std::memory_order_relaxed);
  step_started_ = now();
  since_.store(step_started_, std::memory_order_relaxed);
  phase_.store(phase, std::memory_order_release);
}

void StepWatchdog::mark(StepPhase phase) {
  since_.store(now(), std::memory_order_relaxed);
  // After since_: a reader that sees this phase sees its time (or a later one), never an older.
  phase_.store(phase, std::memory_order_release);
}

void StepWatchdog::endStep() {
  const double t = now();
  phase_.store(StepPhase::kIdle, std::memory_order_release);
  if (step_started_ >= 0) rule_.stepTook(t - step_started_);
  step_started_ = -1;
  timeout_.store(rule_.seconds(), std::memory_order_relaxed);
  median_.store(rule_.medianStepSeconds().value_or(-1), std::memory_order_relaxed);
}

std::optional<StepStall> StepWatchdog::stalled() const {
  const StepPhase phase = phase_.load(std::memory_order_acquire);
  if (phase == StepPhase::kIdle) return std::nullopt;
  const double since = since_.load(std::memory_order_relaxed);
  const double timeout = timeoutSeconds();
  const double grace = phase == StepPhase::kSync ? kSyncGraceSeconds : 0;
  if (now() - since <= timeout + grace) return std::nullopt;
  StepStall stall;
  stall.rank = rank_.load(std::memory_order_relaxed);
  stall.step = step_.load(std::memory_order_relaxed);
  stall.phase = phase;
  stall.timeout_seconds = timeout;
  stall.grace_seconds = grace;
  stall.automatic = rule_.automatic();
  if (const double median = median_.load(std::memory_order_relaxed); median >= 0) {
    stall.median_step_seconds = median;
  }
  return stall;
}

void StepWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const double period = std::clamp(timeoutSeconds() / 20, 0.01, 1.0);
    wake_.wait_for(lock, std::chrono::duration<double>(period), [this] { return stopping_; });
    if (stopping_) return;
    if (const std::optional<StepStall> stall = stalled()) {
      if (!options_.on_stall) die(*stall);
      options_.on_stall(*stall);
      return;
    }
  }
}

void StepWatchdog::die(const StepStall& stall) const {
  const std::string line = options_.program + ": error: " + stallMessage(stall) + "\n";
  // What the program printed before the line; never wait for a lock the stuck thread may hold.
  if (ftrylockfile(stdout) == 0) {
    fflush_unlocked(stdout);
    funlockfile(stdout);
  }
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  _exit(options_.exit_code);
}

}  // namespace cumulus
