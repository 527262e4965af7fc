#pragma once
// trainer.sync: diloco, the trainer's side of <cumulus/diloco.h>: what a checkpoint (and the state
// a live peer sends a joiner) holds, and how a rank takes it back.
//
// A DiLoCo checkpoint's model.pt holds the global parameters (the model every rank agrees on,
// what an evaluation and the final weights use), and two extra files:
//   diloco.pt           the outer optimizer's momentum, a float32 tensor over all parameters in
//                       order (the same on every rank);
//   diloco_replicas.pt  every rank's own state, a float32 tensor [world size, n], row r from rank
//   r:
//                       its replica's parameters, its inner optimizer's slots (in the order of
//                       optim.pt's tensors), its outer residual. optim.pt holds rank 0's inner
//                       optimizer, whose step count every rank shares.
// With the same world size a resume is bit-identical; with another, every rank starts the round
// from the global parameters with rank 0's inner optimizer (a note says so).

#include <torch/types.h>

#include <string>
#include <vector>

#include "configs/experiment.h"
#include "cumulus/checkpoint.h"
#include "cumulus/diloco.h"
#include "trainer/optimizer.h"

namespace cumulus::trainer {

inline constexpr char kDilocoFile[] = "diloco.pt";
inline constexpr char kReplicaFile[] = "diloco_replicas.pt";

// The public options from the diloco section. Throws SetupError naming the key, for what the
// schema cannot see (fragments larger than the model's tensor count).
DiLoCoOptions dilocoOptions(const configs::Experiment& experiment, double timeout_seconds);

// Replaces the parameters in `checkpoint.tensors` (named `names`, in DiLoCo's order) with the
// global ones and adds kDilocoFile.
void addDilocoState(Checkpoint& checkpoint, const DiLoCo& diloco,
                    const std::vector<std::string>& names);
// After restoreTraining put the checkpoint's model.pt into `params`: they become DiLoCo's global
// parameters, with the momentum of kDilocoFile (zeros, and a note, when there is none: a
// checkpoint of every-step training). The replica is the global parameters until a row says
// otherwise. Throws ResumeError naming the file when it does not fit.
void restoreDilocoState(const Checkpoint& checkpoint, DiLoCo& diloco,
                        const std::vector<torch::Tensor>& params, const std::string& where,
                        std::vector<std::string>& notes);

// This rank's row of kReplicaFile, and back. loadReplicaRow throws ResumeError when the row does
// not fit; it changes nothing then.
torch::Tensor replicaRow(const std::vector<torch::Tensor>& params, const Optimizer& optimizer,
                         const DiLoCo& diloco);
void loadReplicaRow(const torch::Tensor& row, const std::vector<torch::Tensor>& params,
                    Optimizer& optimizer, DiLoCo& diloco);
void addReplicaRows(Checkpoint& checkpoint, const torch::Tensor& rows);
// kReplicaFile's rows, or an undefined tensor when there is none.
torch::Tensor replicaRowsOf(const Checkpoint& checkpoint, const std::string& checkpoint_path);

}  // namespace cumulus::trainer
