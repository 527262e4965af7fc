#include "trainer/schedule.h"

#include <algorithm>
#include <cmath>

namespace cumulus::trainer {

LrSchedule::LrSchedule(const configs::ScheduleConfig& config, double base_lr, int64_t total_steps)
    : config_(config), base_(base_lr), total_(total_steps) {
  if (!(base_lr > 0)) throw std::invalid_argument("optimizer.lr: must be > 0");
  if (config.warmup_steps < 0) throw std::invalid_argument("schedule.warmup_steps: must be >= 0");
  if (config.name == configs::ScheduleName::kStep && config.step_size <= 0) {
    throw std::invalid_argument("schedule.step_size: must be > 0 for the step schedule");
  }
  if (total_steps <= 0) throw std::invalid_argument("the run has no optimizer steps to schedule");
}

double LrSchedule::lr(int64_t step) const {
  const int64_t warmup = config_.warmup_steps;
  if (step < warmup) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t t = step - warmup;
  switch (config_.name) {
    case configs::ScheduleName::kConstant:
      return base_;
    case configs::ScheduleName::kStep:
      return base_ * std::pow(config_.gamma, static_cast<double>(t / config_.step_size));
    case configs::ScheduleName::kCosine: {
      const int64_t span = std::max<int64_t>(1, total_ - warmup);
      if (t >= span) return config_.min_lr;
      const double progress = static_cast<double>(t) / static_cast<double>(span);
      return config_.min_lr + (base_ - config_.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
    }
  }
  return base_;  // unreachable: every schedule is handled above
}

}  // namespace cumulus::trainer
