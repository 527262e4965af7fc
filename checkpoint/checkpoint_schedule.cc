#include "checkpoint/checkpoint_schedule.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace cumulus::checkpoint {

CheckpointSchedule::CheckpointSchedule(int64_t every_steps, double every_seconds,
                                       std::function<double()> clock)
    : every_steps_(every_steps), every_seconds_(every_seconds), clock_(std::move(clock)) {
  if (every_steps < 0) {
    throw std::invalid_argument("checkpoint.every_steps: " + std::to_string(every_steps) +
                                " is negative; use 0 to turn it off");
  }
  if (!(every_seconds >= 0)) {
    throw std::invalid_argument("checkpoint.every_seconds: " + std::to_string(every_seconds) +
                                " is negative; use 0 to turn it off");
  }
  last_saved_ = now();
}

double CheckpointSchedule::now() const {
  if (clock_) return clock_();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool CheckpointSchedule::due(int64_t steps_done) const {
  if (every_steps_ > 0 && steps_done > 0 && steps_done % every_steps_ == 0) return true;
  return every_seconds_ > 0 && now() - last_saved_ >= every_seconds_;
}

void CheckpointSchedule::markSaved() { last_saved_ = now(); }

double CheckpointSchedule::secondsUntilDue() const {
  if (every_seconds_ <= 0) return -1;
  return std::max(0.0, every_seconds_ - (now() - last_saved_));
}

}  // namespace cumulus::checkpoint
