#pragma once
// trainer.sync diloco, the Trainer's part (docs/diloco.md): building the DiLoCo over the model's
// parameters, a fresh start's replicas made rank 0's, and its state in checkpoints. The Trainer
// owns the DiLoCo these return and take; the step's own calls are in training_loop.cc.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "configs/experiment.h"
#include "cumulus/checkpoint.h"
#include "cumulus/diloco.h"

namespace cumulus {
class ProcessGroup;
}
namespace cumulus::models {
class Model;
}

namespace cumulus::trainer {

class Optimizer;

// The DiLoCo over `params` and the model's buffers, or null unless trainer.sync is diloco.
// Throws SetupError for diloco.* settings the model cannot take (more fragments than parameter
// tensors, an option DiLoCo refuses). Adds its one-line description to `notes`.
std::unique_ptr<DiLoCo> buildDiloco(const configs::Experiment& config, models::Model& model,
                                    const std::vector<torch::Tensor>& params,
                                    std::vector<std::string>& notes);

// A fresh start (step 0, more than one rank): every replica takes rank 0's parameters and
// buffers, and they are the global ones. The replicas were made from the same seed, so usually
// they already are: the ranks compare the SHA-256 of their parameters (32 bytes each) and
// broadcast the model only when one differs, which spares a slow link a model's worth of bytes at
// every launch.
void startDiloco(DiLoCo& diloco, cumulus::ProcessGroup& group, models::Model& model,
                 std::vector<torch::Tensor>& params);

// After restoreTraining: model.pt was the global parameters; this rank's row, when the
// checkpoint at `path` has one for a group of `world_size`, is its replica (another world size:
// every rank starts the round from the global parameters, and a note says so). Throws
// ResumeError naming the file when the row does not fit.
void restoreDiloco(const Checkpoint& checkpoint, const std::string& path, DiLoCo& diloco,
                   const std::vector<torch::Tensor>& params, Optimizer& optimizer, int64_t rank,
                   int64_t world_size, std::vector<std::string>& notes);

// DiLoCo's state (the outer momentum, under the model's parameter names) into `checkpoint`.
void addDiloco(Checkpoint& checkpoint, const DiLoCo& diloco, models::Model& model);

}  // namespace cumulus::trainer
