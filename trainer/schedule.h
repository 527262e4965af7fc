#pragma once
// Learning-rate schedules as a pure function of the optimizer step: no state, so a resumed run
// computes exactly the rate the original run would have used.
//
// Steps are 0-based: lr(s) is the rate used by the optimizer step that turns s completed steps
// into s + 1. With warmup_steps = W > 0, steps 0..W-1 ramp linearly, lr(s) = base * (s + 1) / W,
// so the first step is not wasted at rate 0 and step W-1 uses the full base rate. From step W on
// the base schedule runs on its own clock t = s - W over T = total_steps - W steps:
//   constant: base
//   step:     base * gamma^floor(t / step_size)
//   cosine:   min_lr + (base - min_lr) * (1 + cos(pi * t / T)) / 2, i.e. base at t = 0 and min_lr
//             at t = T (the step just after the last one, as torch's CosineAnnealingLR(T_max=T));
//             steps past T stay at min_lr.
// No LibTorch here.

#include <cstdint>
#include <stdexcept>
#include <string>

#include "configs/experiment.h"

namespace cumulus::trainer {

class LrSchedule {
 public:
  // Throws std::invalid_argument for base_lr <= 0, a negative warm-up,
  // step_size <= 0 for "step", or total_steps <= 0.
  LrSchedule(const configs::ScheduleConfig& config, double base_lr, int64_t total_steps);

  double lr(int64_t step) const;
  int64_t totalSteps() const { return total_; }

 private:
  configs::ScheduleConfig config_;
  double base_;
  int64_t total_;
};

}  // namespace cumulus::trainer
