#include "trainer/training_checkpoint.h"

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <set>
#include <sstream>

#include "base/hash.h"
#include "checkpoint/checkpoint_snapshot.h"
#include "checkpoint/torch_pickle.h"
#include "configs/digest.h"
#include "configs/parse.h"
#include "models/model.h"
#include "trainer/optimizer.h"
#include "trainer/resume.h"

namespace cumulus::trainer {
namespace {

checkpoint::NamedTensors modelTensors(models::Model& model) {
  checkpoint::NamedTensors tensors = model.namedParameters();
  for (auto& buffer : model.namedBuffers()) tensors.push_back(std::move(buffer));
  return tensors;
}

std::vector<std::string> parameterNames(models::Model& model) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : model.namedParameters()) names.push_back(name);
  return names;
}

std::string shapeOf(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

Checkpoint captureCheckpoint(models::Model& model, const Optimizer& optimizer,
                             const configs::Experiment& config, const RunEnv& env,
                             const TrainingPosition& position) {
  Checkpoint checkpoint;
  checkpoint.tensors = checkpoint::cloneTensors(modelTensors(model));
  checkpoint::CheckpointSnapshot optimizer_part;
  checkpoint::addOptimizerState(optimizer.exportState(), parameterNames(model), optimizer_part);
  checkpoint.optimizer_tensors = std::move(optimizer_part.optimizer_tensors);
  checkpoint.optimizer_scalars = std::move(optimizer_part.optimizer_scalars);
  CheckpointState& s = checkpoint.state;
  s.step = static_cast<uint64_t>(position.steps_done);
  s.epoch = static_cast<uint64_t>(position.sampler.epoch);
  s.sampler_cursor = static_cast<uint64_t>(position.sampler.cursor);
  s.seed = config.trainer.seed;
  s.config_digest = configs::configDigest(config);
  s.world_size = static_cast<uint32_t>(env.world_size);
  s.global_batch = static_cast<uint64_t>(config.trainer.global_batch_size);
  s.config_yaml = configs::toYaml(config);
  s.model = config.model.name;
  s.optimizer = base::nameOf(config.optimizer.name);
  s.samples_seen = position.samples_seen;
  s.preempted = position.preempted;
  s.generation = static_cast<uint64_t>(env.generation);
  s.run_id = env.run_id;
  s.learning_rate = position.learning_rate;
  s.grad_accumulation = static_cast<uint32_t>(position.grad_accumulation);
  s.batch_shares = position.batch_shares;
  s.precision = position.precision;
  // format_version, framework_version and created_unix_ms: Checkpoints::save fills them.
  return checkpoint;
}

void restoreTraining(const Checkpoint& checkpoint, models::Model& model, Optimizer& optimizer,
                     const std::string& source) {
  const std::string where = source.empty() ? "" : source + ": ";
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [name, tensor] : checkpoint.tensors) saved.emplace(name, tensor);
  // Everything is checked before anything is copied: a state that does not fit leaves the model
  // and the optimizer as they were.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // live, saved
  std::set<std::string> used;
  for (auto& [name, live] : modelTensors(model)) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      throw ResumeError(where + "model.pt has no tensor '" + name +
                        "' that the model has; it was written for another model");
    }
    if (!it->second.sizes().equals(live.sizes()) || it->second.dtype() != live.dtype()) {
      throw ResumeError(where + "model.pt tensor '" + name + "' has shape " + shapeOf(it->second) +
                        ", the model's is " + shapeOf(live));
    }
    copies.emplace_back(live, it->second);
    used.insert(name);
  }
  for (const auto& [name, tensor] : saved) {
    if (!used.count(name)) {
      throw ResumeError(where + "model.pt has a tensor '" + name +
                        "' that the model does not; it was written for another model");
    }
  }
  checkpoint::OptimizerState optimizer_state;
  try {
    checkpoint::CheckpointSnapshot optimizer_part;
    optimizer_part.optimizer_tensors = checkpoint.optimizer_tensors;  // handles, not copies
    optimizer_part.optimizer_scalars = checkpoint.optimizer_scalars;
    optimizer_state = checkpoint::optimizerStateFrom(optimizer_part, parameterNames(model));
    optimizer.importState(optimizer_state);
  } catch (const std::invalid_argument& e) {
    throw ResumeError(where + "optim.pt: " + e.what());
  }
  torch::NoGradGuard no_grad;
  for (auto& [live, from] : copies) live.copy_(from);
}

void addResiduals(Checkpoint& checkpoint, const torch::Tensor& all_ranks) {
  TORCH_INTERNAL_ASSERT(all_ranks.dim() == 2 && all_ranks.scalar_type() == torch::kFloat,
                        "residuals must be [world, n] float32");
  const std::vector<char> bytes = checkpoint::pickleForPython(all_ranks.contiguous());
  checkpoint.files[kResidualFile] = std::string(bytes.data(), bytes.size());
}

torch::Tensor residualsOf(const Checkpoint& checkpoint, const std::string& checkpoint_path) {
  const auto it = checkpoint.files.find(kResidualFile);
  if (it == checkpoint.files.end()) return {};
  const std::string where = checkpoint_path + "/" + kResidualFile + ": ";
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(it->second.begin(), it->second.end()));
  } catch (const c10::Error& e) {
    throw ResumeError(where + "does not load: " + e.what_without_backtrace());
  }
  if (!value.isTensor() || value.toTensor().dim() != 2 ||
      value.toTensor().scalar_type() != torch::kFloat) {
    throw ResumeError(where +
                      "not a [world size, n] float32 tensor; remove it to resume with "
                      "zero residuals");
  }
  return value.toTensor();
}

torch::Tensor residualForRank(const torch::Tensor& saved, int rank, int world, std::string* note) {
  if (saved.size(0) == world) return saved[rank].clone();
  if (note != nullptr) {
    *note = "comm.compression: the checkpoint's error-feedback residuals of " +
            std::to_string(saved.size(0)) + " ranks are summed into rank 0's for " +
            std::to_string(world) + " ranks (the others start at zero)";
  }
  return rank == 0 ? saved.sum(0) : torch::zeros({saved.size(1)}, torch::kFloat);
}

std::string parameterDigest(models::Model& model) {
  base::Sha256 hash;
  for (const auto& [name, tensor] : modelTensors(model)) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const std::string header = name + "|" + shapeOf(t) + "|" + std::string(t.dtype().name()) + "|";
    hash.update(header);
    hash.update(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  }
  return base::toHex(hash.digest());
}

}  // namespace cumulus::trainer
