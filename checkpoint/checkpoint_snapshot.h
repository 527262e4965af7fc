#pragma once
// A checkpoint held in memory: CPU copies of the model and optimizer tensors plus the resume state,
// and its encoding into the files of a checkpoint directory.
//
//   model.pt  pickled Dict[str, Tensor] (torch.save format): parameters, then buffers, by their
//             state_dict names. Python: torch.load("model.pt") -> {"fc1.weight": tensor, ...}.
//   optim.pt  pickled {"tensors": Dict[str, Tensor], "scalars": Dict[str, int|float|str]}; tensor
//             keys are "<parameter name>.<slot>" ("fc1.weight.exp_avg"), scalars hold e.g.
//             {"name": "adamw", "step": 1200}. Python: torch.load("optim.pt").
//   state.pb  proto::CheckpointState, binary.
//   <name>    each of `files` (a program's own: an optimizer archive, a replay buffer), as is.
// Snapshots are plain values: copying one copies tensor handles (shared storage); the capture
// helpers below make the deep copies that keep a snapshot immutable while training goes on.

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "checkpoint/optimizer_state.h"
#include "proto/checkpoint.pb.h"

namespace cumulus::checkpoint {

inline constexpr char kModelFile[] = "model.pt";
inline constexpr char kOptimizerFile[] = "optim.pt";
inline constexpr char kStateFile[] = "state.pb";
inline constexpr uint32_t kCheckpointFormatVersion = 1;

using OptimizerScalar = std::variant<int64_t, double, std::string>;

struct CheckpointSnapshot {
  NamedTensors model;                                        // params + buffers, CPU, owning
  NamedTensors optimizer_tensors;                            // "<param name>.<slot>"
  std::map<std::string, OptimizerScalar> optimizer_scalars;  // "name", "step", ...
  proto::CheckpointState state;                              // state.step names the directory
  std::map<std::string, std::string> files;                  // extra files: name -> bytes
};

// Throws std::invalid_argument unless `name` may be an extra file of a checkpoint: it matches
// [A-Za-z0-9_.-]+, does not start with '.', and is none of model.pt, optim.pt, state.pb, MANIFEST.
void checkExtraFileName(const std::string& name);

// Deep, contiguous CPU copies of `tensors` (detached), in order: one memcpy per tensor for CPU
// tensors. Call at a step boundary, on the training thread, before training goes on.
NamedTensors cloneTensors(const NamedTensors& tensors);

// Adds an optimizer's exported state to `snapshot`: tensor keys "<index>.<slot>" become
// "<param_names[index]>.<slot>", and scalars "name" and "step" are set. The tensors are shared,
// not copied: Optimizer::exportState already returns deep copies. param_names are the names of
// the tensors given to makeOptimizer, in that order. Throws std::invalid_argument for a key whose
// index is not in param_names.
void addOptimizerState(const OptimizerState& state, const std::vector<std::string>& param_names,
                       CheckpointSnapshot& snapshot);
// The inverse, for Optimizer::importState. Throws std::invalid_argument naming a tensor key whose
// parameter is not in param_names (the model changed) or a missing/mistyped "name" or "step".
OptimizerState optimizerStateFrom(const CheckpointSnapshot& snapshot,
                                  const std::vector<std::string>& param_names);

// File name -> bytes for model.pt, optim.pt, state.pb and the extra files. Throws
// std::invalid_argument for a tensor that is not on the CPU, a duplicate name, or an extra file
// name that checkExtraFileName rejects. CPU-bound (pickling copies every tensor).
std::map<std::string, std::string> encodeSnapshot(const CheckpointSnapshot& snapshot);

// The inverse; every file but the three above (and a MANIFEST) becomes one of `files`. `dir` only
// names the checkpoint in errors: std::runtime_error
// "<dir><separator>optim.pt: not an optimizer state file: ..." (a transfer's source: ": ").
CheckpointSnapshot decodeSnapshot(const std::map<std::string, std::string>& files,
                                  const std::string& dir, const std::string& separator = "/");

}  // namespace cumulus::checkpoint
