#pragma once
// How many optimizer steps a run has: trainer.epochs x steps per epoch, capped by
// trainer.max_steps when that is > 0. No LibTorch here.

#include <cstdint>

namespace cumulus::trainer {

// Throws std::invalid_argument naming the keys when there is no step, when epochs x steps per
// epoch does not fit in an int64 and max_steps does not cap it, or when the samples the steps
// draw (steps x trainer.global_batch_size, the sampler's global position) do not fit either.
int64_t plannedSteps(int64_t epochs, int64_t steps_per_epoch, int64_t max_steps,
                     int64_t global_batch_size);

}  // namespace cumulus::trainer
