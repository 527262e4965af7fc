#pragma once
// The error a run ends with when its loss is no longer finite (TrainError, exit 2): the step, the
// loss, and the settings most likely to blame, so that the advice points at the cause.
//
// Every-step sync: the optimizer (optimizer.lr, trainer.grad_clip_norm). trainer.sync diloco has
// two optimizers. The global parameters change only in an outer step, and its momentum holds the
// averaged outer gradients: global parameters that are not finite beside a finite momentum were
// made so by the outer step itself (diloco.outer_lr, diloco.outer_momentum); a replica that
// diverged in its inner steps sends a non-finite outer gradient, which the momentum keeps. When
// neither shows, both optimizers are named, the inner one first.

#include <cstdint>
#include <string>

#include "configs/experiment.h"

namespace cumulus {
class DiLoCo;
}

namespace cumulus::trainer {

// `step` counts from 1; `diloco` is the run's under trainer.sync diloco, null otherwise. Reads
// the DiLoCo's state (a copy of it); call it from the training thread.
std::string divergenceMessage(const configs::Experiment& config, int64_t step, double loss,
                              const DiLoCo* diloco);

}  // namespace cumulus::trainer
