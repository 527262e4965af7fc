#include "trainer/diloco_state.h"

#include <torch/torch.h>

#include <map>
#include <stdexcept>

#include "trainer/resume.h"
#include "trainer/trainer.h"

namespace cumulus::trainer {
namespace {

std::string pickled(const torch::Tensor& tensor) {
  const std::vector<char> bytes = torch::pickle_save(tensor.contiguous());
  return std::string(bytes.data(), bytes.size());
}

// The float32 tensor of `rank` dimensions in files[name], or undefined when there is no such file.
torch::Tensor loadFile(const Checkpoint& checkpoint, const char* name, int64_t rank,
                       const std::string& where) {
  const auto it = checkpoint.files.find(name);
  if (it == checkpoint.files.end()) return {};
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(it->second.begin(), it->second.end()));
  } catch (const c10::Error& e) {
    throw ResumeError(where + name + ": does not load: " + e.what_without_backtrace());
  }
  if (!value.isTensor() || value.toTensor().dim() != rank ||
      value.toTensor().scalar_type() != torch::kFloat) {
    throw ResumeError(where + name + ": not a " + std::to_string(rank) +
                      "-dimensional float32 tensor; it was not written by Cumulus");
  }
  return value.toTensor();
}

int64_t elements(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const torch::Tensor& t : tensors) n += t.numel();
  return n;
}

}  // namespace

DiLoCoOptions dilocoOptions(const configs::Experiment& experiment, double timeout_seconds) {
  const configs::DilocoConfig& d = experiment.diloco;
  DiLoCoOptions o;
  o.inner_steps = d.inner_steps;
  o.outer_lr = d.outer_lr;
  o.outer_momentum = d.outer_momentum;
  o.nesterov = d.nesterov;
  o.fragments = d.fragments;
  o.overlap = d.overlap;
  o.mix = d.mix;
  o.outer_compression = d.outer_compression;
  o.timeout_seconds = timeout_seconds;
  return o;
}

void addDilocoState(Checkpoint& checkpoint, const DiLoCo& diloco,
                    const std::vector<std::string>& names) {
  const DiLoCoState state = diloco.state();
  std::map<std::string, torch::Tensor> global;
  for (size_t i = 0; i < names.size() && i < state.global.size(); ++i) {
    global.emplace(names[i], state.global[i]);
  }
  for (auto& [name, tensor] : checkpoint.tensors) {
    if (const auto it = global.find(name); it != global.end()) tensor = it->second;
  }
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& m : state.momentum) flat.push_back(m.reshape(-1));
  checkpoint.files[kDilocoFile] = pickled(torch::cat(flat));
}

void restoreDilocoState(const Checkpoint& checkpoint, DiLoCo& diloco,
                        const std::vector<torch::Tensor>& params, const std::string& where,
                        std::vector<std::string>& notes) {
  DiLoCoState state;
  for (const torch::Tensor& p : params) state.global.push_back(p.detach().clone());
  const torch::Tensor momentum = loadFile(checkpoint, kDilocoFile, 1, where);
  if (!momentum.defined()) {
    notes.push_back("trainer.sync diloco: the checkpoint has no " + std::string(kDilocoFile) +
                    " (it was written by every-step training): the outer momentum starts at zero "
                    "from its parameters");
  } else if (momentum.numel() != elements(params)) {
    throw ResumeError(where + kDilocoFile + ": " + std::to_string(momentum.numel()) +
                      " momentum values for a model of " + std::to_string(elements(params)) +
                      " parameters; it was written for another model");
  }
  int64_t at = 0;
  for (const torch::Tensor& p : params) {
    state.momentum.push_back(momentum.defined()
                                 ? momentum.narrow(0, at, p.numel()).view(p.sizes()).clone()
                                 : torch::zeros_like(p));
    at += p.numel();
  }
  diloco.loadState(state);
  diloco.resetReplica();
  diloco.setResidual(torch::zeros({elements(params)}));
}

torch::Tensor replicaRow(const std::vector<torch::Tensor>& params, const Optimizer& optimizer,
                         const DiLoCo& diloco) {
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& p : params) parts.push_back(p.detach().reshape(-1));
  const checkpoint::OptimizerState inner = optimizer.exportState();
  for (const auto& [key, tensor] : inner.tensors) parts.push_back(tensor.reshape(-1));
  parts.push_back(diloco.residual());
  return torch::cat(parts);
}

void loadReplicaRow(const torch::Tensor& row, const std::vector<torch::Tensor>& params,
                    Optimizer& optimizer, DiLoCo& diloco) {
  checkpoint::OptimizerState inner = optimizer.exportState();
  const int64_t n = elements(params);
  int64_t slots = 0;
  for (const auto& [key, tensor] : inner.tensors) slots += tensor.numel();
  if (row.dim() != 1 || row.numel() != 2 * n + slots) {
    throw ResumeError(std::string(kReplicaFile) + ": a row of " + std::to_string(row.numel()) +
                      " values; this model and optimizer need " + std::to_string(2 * n + slots));
  }
  int64_t at = n;
  for (auto& [key, tensor] : inner.tensors) {
    tensor = row.narrow(0, at, tensor.numel()).view(tensor.sizes()).clone();
    at += tensor.numel();
  }
  try {
    optimizer.importState(inner);
  } catch (const std::invalid_argument& e) {
    throw ResumeError(std::string(kReplicaFile) + ": " + e.what());
  }
  torch::NoGradGuard no_grad;
  at = 0;
  for (const torch::Tensor& p : params) {
    p.copy_(row.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
  diloco.setResidual(row.narrow(0, n + slots, n).clone());
}

void addReplicaRows(Checkpoint& checkpoint, const torch::Tensor& rows) {
  TORCH_INTERNAL_ASSERT(rows.dim() == 2 && rows.scalar_type() == torch::kFloat,
                        "replica rows must be [world, n] float32");
  checkpoint.files[kReplicaFile] = pickled(rows);
}

torch::Tensor replicaRowsOf(const Checkpoint& checkpoint, const std::string& checkpoint_path) {
  return loadFile(checkpoint, kReplicaFile, 2, checkpoint_path + "/");
}

}  // namespace cumulus::trainer
