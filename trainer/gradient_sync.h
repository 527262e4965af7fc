#pragma once
// The seam between the training loop and gradient communication is public API
// (<cumulus/data_parallel.h>: GradientSync, LocalGradientSync, and why the sync is a plain SUM).
// The trainer's loss normalization (loss.h) makes each rank's loss its samples' summed per-sample
// mean losses divided by the global batch's sample count, as that contract asks.

#include "cumulus/data_parallel.h"

namespace cumulus::trainer {
using cumulus::GradientSync;
using cumulus::LocalGradientSync;
}  // namespace cumulus::trainer
