#pragma once
// The vocabulary that checkpoints (cumulus_checkpoint) and the trainer's optimizers and state_dict
// files (cumulus_trainer) share: named tensors, and an optimizer's state between steps. Header
// only, in the lower library, so that neither includes the other's headers for it.

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cumulus::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Everything an optimizer carries between steps. Tensor keys are "<param index>.<slot>", with the
// slot names of torch.optim's state_dict: "momentum_buffer" (SGD), "exp_avg", "exp_avg_sq"
// (AdamW). A slot that does not exist yet (SGD before its first step) is absent.
struct OptimizerState {
  std::string name;  // "sgd" or "adamw"
  int64_t step = 0;  // optimizer steps taken
  std::map<std::string, torch::Tensor> tensors;
};

}  // namespace cumulus::checkpoint
