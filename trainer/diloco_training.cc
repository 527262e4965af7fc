// trainer.sync diloco, the Trainer's part (docs/diloco.md): the DiLoCo over the model's
// parameters, a fresh start's replicas made rank 0's, and its state in checkpoints and in the
// state a live peer sends. The step's own calls are in training_loop.cc.

#include <torch/torch.h>

#include <cstdio>
#include <stdexcept>

#include "cumulus/process_group.h"
#include "trainer/diloco_state.h"
#include "trainer/resume.h"
#include "trainer/trainer_impl.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {

void Trainer::Impl::buildDiloco() {
  if (config_.trainer.sync != configs::SyncMode::kDiloco) return;
  const int64_t tensors = static_cast<int64_t>(params_.size());
  if (config_.diloco.fragments > tensors) {
    throw SetupError("diloco.fragments: " + std::to_string(config_.diloco.fragments) +
                     " is more than the model's " + std::to_string(tensors) +
                     " parameter tensors; a fragment holds whole tensors, so use at most " +
                     std::to_string(tensors));
  }
  try {
    diloco_ =
        std::make_unique<DiLoCo>(params_, dilocoOptions(config_, config_.comm.timeout_seconds));
  } catch (const std::invalid_argument& e) {
    throw SetupError(std::string("diloco: ") + e.what());
  }
  std::vector<torch::Tensor> buffers;
  for (auto& [name, buffer] : model_->namedBuffers()) buffers.push_back(buffer);
  diloco_->attachBuffers(std::move(buffers));
  checkpoints_->setRankState([this] { return replicaRow(params_, *optimizer_, *diloco_); });
  const configs::DilocoConfig& d = config_.diloco;
  char outer[96];
  std::snprintf(outer, sizeof(outer), "outer SGD lr %g momentum %g%s", d.outer_lr, d.outer_momentum,
                d.nesterov ? " (Nesterov)" : "");
  resume_notes_.push_back("trainer.sync diloco: " + std::to_string(d.inner_steps) +
                          " inner steps a round, " + std::to_string(diloco_->fragments().size()) +
                          " fragment(s), " + outer + ", outer gradients in " +
                          compressionName(d.outer_compression) +
                          (d.overlap ? ", overlapped with the next step" : ""));
}

// From step 0 every replica takes rank 0's parameters and buffers, and they are the global ones.
// The replicas were made from the same seed, so usually they already are: the ranks compare the
// SHA-256 of their parameters (32 bytes each) and broadcast the model only when one differs,
// which spares a slow link a model's worth of bytes at every launch.
void Trainer::Impl::startDiloco() {
  if (!diloco_ || start_step_ != 0 || group_ == nullptr) return;
  torch::NoGradGuard no_grad;
  const std::string digest = parameterDigest(*model_);  // 64 hex digits
  const torch::Tensor mine =
      torch::from_blob(const_cast<char*>(digest.data()), {16}, torch::kInt32).clone();
  const torch::Tensor all = group_->allgather(mine);
  if (!all.eq(all[0]).all().item<bool>()) {
    for (torch::Tensor& p : params_) group_->broadcast(p);
    for (auto& [name, buffer] : model_->namedBuffers()) group_->broadcast(buffer);
  }
  DiLoCoState state = diloco_->state();
  for (size_t i = 0; i < params_.size(); ++i) state.global[i] = params_[i].detach().clone();
  diloco_->loadState(state);
}

// After restoreTraining: model.pt was the global parameters; this rank's row, when the
// checkpoint has one for it, is its replica.
void Trainer::Impl::restoreDiloco(const Checkpoint& checkpoint, const std::string& path) {
  restoreDilocoState(checkpoint, *diloco_, params_, path + "/", resume_notes_);
  const torch::Tensor rows = replicaRowsOf(checkpoint, path);
  if (!rows.defined()) return;
  if (rows.size(0) != env_.world_size) {
    resume_notes_.push_back("trainer.sync diloco: the checkpoint holds the replicas of " +
                            std::to_string(rows.size(0)) + " ranks and this launch has " +
                            std::to_string(env_.world_size) +
                            ": every rank starts the round from the global parameters, with "
                            "rank 0's inner optimizer");
    return;
  }
  try {
    loadReplicaRow(rows[env_.rank], params_, *optimizer_, *diloco_);
  } catch (const ResumeError& e) {
    throw ResumeError(path + "/" + e.what());
  }
}

void Trainer::Impl::addDiloco(Checkpoint& checkpoint) const {
  addDilocoState(checkpoint, *diloco_, parameterNames());
}

std::vector<std::string> Trainer::Impl::parameterNames() const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : model_->namedParameters()) names.push_back(name);
  return names;
}

}  // namespace cumulus::trainer
