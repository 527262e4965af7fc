// trainer.sync diloco, the Trainer's part (diloco_training.h).

#include "trainer/diloco_training.h"

#include <torch/torch.h>

#include <cstdio>
#include <stdexcept>

#include "cumulus/process_group.h"
#include "models/model.h"
#include "trainer/diloco_state.h"
#include "trainer/optimizer.h"
#include "trainer/resume.h"
#include "trainer/trainer.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {

std::unique_ptr<DiLoCo> buildDiloco(const configs::Experiment& config, models::Model& model,
                                    const std::vector<torch::Tensor>& params,
                                    std::vector<std::string>& notes) {
  if (config.trainer.sync != configs::SyncMode::kDiloco) return nullptr;
  const int64_t tensors = static_cast<int64_t>(params.size());
  if (config.diloco.fragments > tensors) {
    throw SetupError("diloco.fragments: " + std::to_string(config.diloco.fragments) +
                     " is more than the model's " + std::to_string(tensors) +
                     " parameter tensors; a fragment holds whole tensors, so use at most " +
                     std::to_string(tensors));
  }
  std::unique_ptr<DiLoCo> diloco;
  try {
    diloco = std::make_unique<DiLoCo>(params, dilocoOptions(config, config.comm.timeout_seconds));
  } catch (const std::invalid_argument& e) {
    throw SetupError(std::string("diloco: ") + e.what());
  }
  std::vector<torch::Tensor> buffers;
  for (auto& [name, buffer] : model.namedBuffers()) buffers.push_back(buffer);
  diloco->attachBuffers(std::move(buffers));
  const configs::DilocoConfig& d = config.diloco;
  char outer[96];
  std::snprintf(outer, sizeof(outer), "outer SGD lr %g momentum %g%s", d.outer_lr, d.outer_momentum,
                d.nesterov ? " (Nesterov)" : "");
  notes.push_back("trainer.sync diloco: " + std::to_string(d.inner_steps) +
                  " inner steps a round, " + std::to_string(diloco->fragments().size()) +
                  " fragment(s), " + outer + ", outer gradients in " +
                  compressionName(d.outer_compression) +
                  (d.overlap ? ", overlapped with the next step" : ""));
  return diloco;
}

void startDiloco(DiLoCo& diloco, cumulus::ProcessGroup& group, models::Model& model,
                 std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const std::string digest = parameterDigest(model);  // 64 hex digits
  const torch::Tensor mine =
      torch::from_blob(const_cast<char*>(digest.data()), {16}, torch::kInt32).clone();
  const torch::Tensor all = group.allgather(mine);
  if (!all.eq(all[0]).all().item<bool>()) {
    for (torch::Tensor& p : params) group.broadcast(p);
    for (auto& [name, buffer] : model.namedBuffers()) group.broadcast(buffer);
  }
  DiLoCoState state = diloco.state();
  for (size_t i = 0; i < params.size(); ++i) state.global[i] = params[i].detach().clone();
  diloco.loadState(state);
}

void restoreDiloco(const Checkpoint& checkpoint, const std::string& path, DiLoCo& diloco,
                   const std::vector<torch::Tensor>& params, Optimizer& optimizer, int64_t rank,
                   int64_t world_size, std::vector<std::string>& notes) {
  restoreDilocoState(checkpoint, diloco, params, path + "/", notes);
  const torch::Tensor rows = replicaRowsOf(checkpoint, path);
  if (!rows.defined()) return;
  if (rows.size(0) != world_size) {
    notes.push_back("trainer.sync diloco: the checkpoint holds the replicas of " +
                    std::to_string(rows.size(0)) + " ranks and this launch has " +
                    std::to_string(world_size) +
                    ": every rank starts the round from the global parameters, with rank 0's "
                    "inner optimizer");
    return;
  }
  try {
    loadReplicaRow(rows[rank], params, optimizer, diloco);
  } catch (const ResumeError& e) {
    throw ResumeError(path + "/" + e.what());
  }
}

void addDiloco(Checkpoint& checkpoint, const DiLoCo& diloco, models::Model& model) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : model.namedParameters()) names.push_back(name);
  addDilocoState(checkpoint, diloco, names);
}

}  // namespace cumulus::trainer
