#include "trainer/step_count.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace cumulus::trainer {

int64_t plannedSteps(int64_t epochs, int64_t steps_per_epoch, int64_t max_steps,
                     int64_t global_batch_size) {
  int64_t steps = 0;
  if (__builtin_mul_overflow(std::max<int64_t>(0, epochs), steps_per_epoch, &steps)) {
    if (max_steps <= 0) {
      throw std::invalid_argument(
          "trainer.epochs: " + std::to_string(epochs) + " epochs of " +
          std::to_string(steps_per_epoch) +
          " steps is more steps than a 64-bit count holds; lower trainer.epochs or set "
          "trainer.max_steps");
    }
    steps = max_steps;  // the cap is what runs
  }
  if (max_steps > 0) steps = std::min(steps, max_steps);
  if (steps <= 0)
    throw std::invalid_argument("trainer.epochs / trainer.max_steps: the run has no steps");
  int64_t samples = 0;
  if (__builtin_mul_overflow(steps, global_batch_size, &samples)) {
    throw std::invalid_argument(
        "trainer.epochs / trainer.max_steps: " + std::to_string(steps) + " steps of " +
        std::to_string(global_batch_size) +
        " samples (trainer.global_batch_size) is more samples than a 64-bit count holds; lower "
        "trainer.epochs or trainer.max_steps");
  }
  return steps;
}

}  // namespace cumulus::trainer
