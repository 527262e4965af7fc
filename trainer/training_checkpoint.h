#pragma once
// The bridge between a live training run and a public Checkpoint (<cumulus/checkpoint.h>): what the
// training loop captures at a step boundary and what a resume puts back (docs/design.md
// "Checkpoints and the run directory"). The decision whether a checkpoint may be resumed is
// resume.h's; this file only moves the state.
//
// Captured: the model's parameters and buffers (deep CPU copies, so training may go on while a
// background save encodes them), the optimizer's exported state, and state.pb (step, sampler
// epoch and global cursor, config digest and YAML, world size, ...). Not captured: an RNG state,
// because the trainer reseeds torch from (seed, epoch, step, rank) at every step.
// Call from the training thread at a step boundary. Not thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "configs/experiment.h"
#include "cumulus/checkpoint.h"
#include "cumulus/sampler.h"
#include "trainer/run_env.h"

namespace cumulus::models {
class Model;
}

namespace cumulus::trainer {

class Optimizer;

struct TrainingPosition {
  int64_t steps_done = 0;         // completed optimizer steps: the checkpoint's step
  SamplerState sampler;           // after the last completed step
  uint64_t samples_seen = 0;      // global samples consumed since the start of training
  double learning_rate = 0;       // of the last step
  bool preempted = false;         // taken at an agreed preemption stop
  int64_t grad_accumulation = 1;  // micro-batches per step this launch runs
  // The ranks' shares of the global batch in force for the next step; empty: equal.
  std::vector<int64_t> batch_shares;
  std::string precision = "fp32";  // what this launch trains in
};

Checkpoint captureCheckpoint(models::Model& model, const Optimizer& optimizer,
                             const configs::Experiment& config, const RunEnv& env,
                             const TrainingPosition& position);

// Copies the checkpoint's model tensors into `model`'s parameters and buffers, by name, and imports
// the optimizer state. Throws ResumeError "<source>: ..." naming the tensor for a missing, extra
// or differently shaped tensor, or an optimizer state the optimizer rejects; the model is then
// unchanged. `source` says where the state came from: "checkpoint <path>" (empty: the messages
// start with the file, for a caller that names the source itself, as Elastic does a sender).
void restoreTraining(const Checkpoint& checkpoint, models::Model& model, Optimizer& optimizer,
                     const std::string& source);

// comm.compression bf16: every rank's error-feedback residuals (DataParallel::errorFeedback),
// kept as the extra file comm_residual.pt: a pickled float32 tensor [world size, n], row r from
// rank r (Python: torch.load("comm_residual.pt")). A checkpoint written without compression, or by
// an older version, has no such file; older versions ignore it.
inline constexpr char kResidualFile[] = "comm_residual.pt";
// Adds `all_ranks` ([world, n] float32, CPU) to `checkpoint` as kResidualFile.
void addResiduals(Checkpoint& checkpoint, const torch::Tensor& all_ranks);
// The residuals `checkpoint` holds, or an undefined tensor. Throws ResumeError naming the file
// when it is not a 2-D float32 tensor.
torch::Tensor residualsOf(const Checkpoint& checkpoint, const std::string& checkpoint_path);
// This rank's residual from `saved` ([saved world, n]) in a group of `world`: row `rank` with the
// same world size (the resumed run is then bit-identical). With another world size the rows are
// summed into rank 0's and every other rank starts from zeros: error feedback needs only that the
// sum over the ranks is kept. Then `note` (when given) is set to a line that says so.
torch::Tensor residualForRank(const torch::Tensor& saved, int rank, int world, std::string* note);

// SHA-256 (hex) over the names, shapes, dtypes and bytes of the model's parameters and buffers:
// "bit-identical parameters" as one string, for tests and logs.
std::string parameterDigest(models::Model& model);

}  // namespace cumulus::trainer
