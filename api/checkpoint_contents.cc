// Checkpoint, the contents (<cumulus/checkpoint.h>): a module's tensors, an optimizer's archive,
// torch's RNG and the sampler's position into a checkpoint value, and back.

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/serialize.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "cumulus/checkpoint.h"

namespace cumulus {
namespace {

// Parameters, then buffers, recursively, by their state_dict names; undefined ones skipped.
NamedTensors moduleTensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (item.value().defined()) out.emplace_back(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (item.value().defined()) out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::string shapeText(const torch::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

// Throws CheckpointError unless `stored` can be copied into `target` as is.
void checkFits(const std::string& name, const torch::Tensor& stored, const torch::Tensor& target) {
  if (stored.sizes() != target.sizes()) {
    throw CheckpointError("tensor \"" + name + "\": shape " + shapeText(stored) +
                          " in the checkpoint, " + shapeText(target) + " in the module");
  }
  if (stored.scalar_type() != target.scalar_type()) {
    throw CheckpointError("tensor \"" + name + "\": dtype " + c10::toString(stored.scalar_type()) +
                          " in the checkpoint, " + c10::toString(target.scalar_type()) +
                          " in the module");
  }
}

// LibTorch's Optimizer::load restores every parameter's state but not the groups' options (lr,
// betas, ...), which the archive holds too: put them back when the groups' options are of type
// `Options`. Returns false when they are not.
template <typename Options>
bool restoreOptionsAs(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  auto& groups = optimizer.param_groups();
  if (groups.empty() || dynamic_cast<Options*>(&groups[0].options()) == nullptr) return false;
  torch::serialize::InputArchive groups_archive;
  archive.read("param_groups", groups_archive);
  std::vector<std::pair<std::vector<std::string>, std::unique_ptr<torch::optim::OptimizerOptions>>>
      saved;
  torch::optim::detail::serialize<Options>(groups_archive, saved);
  // Optimizer::load already checked that the groups match in number and size.
  for (size_t i = 0; i < saved.size() && i < groups.size(); ++i) {
    groups[i].set_options(std::move(saved[i].second));
  }
  return true;
}

// False for an optimizer whose options are of another type: its options stay as built.
bool restoreOptions(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  using namespace torch::optim;  // NOLINT(build/namespaces): six option types
  return restoreOptionsAs<AdamOptions>(optimizer, archive) ||
         restoreOptionsAs<AdamWOptions>(optimizer, archive) ||
         restoreOptionsAs<SGDOptions>(optimizer, archive) ||
         restoreOptionsAs<RMSpropOptions>(optimizer, archive) ||
         restoreOptionsAs<AdagradOptions>(optimizer, archive) ||
         restoreOptionsAs<LBFGSOptions>(optimizer, archive);
}

bool startsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

Checkpoint& Checkpoint::addModule(const torch::nn::Module& module, const std::string& prefix) {
  for (const auto& [name, tensor] : moduleTensors(module)) {
    tensors.emplace_back(prefix + name,
                         tensor.detach().to(torch::kCPU).clone(at::MemoryFormat::Contiguous));
  }
  return *this;
}

void Checkpoint::restoreModule(torch::nn::Module& module, const std::string& prefix) const {
  std::map<std::string, torch::Tensor> stored;
  for (const auto& [name, tensor] : tensors) {
    if (startsWith(name, prefix)) stored.emplace(name, tensor);
  }
  const NamedTensors targets = moduleTensors(module);
  // Every check before the first copy: a module that does not fit is left as it was.
  std::set<std::string> used;
  for (const auto& [name, target] : targets) {
    const std::string key = prefix + name;
    const auto it = stored.find(key);
    if (it == stored.end()) {
      throw CheckpointError("tensor \"" + key + "\" of the module is not in the checkpoint");
    }
    checkFits(key, it->second, target);
    used.insert(key);
  }
  for (const auto& [name, tensor] : stored) {
    if (used.count(name) == 0) {
      throw CheckpointError("tensor \"" + name + "\" of the checkpoint is not in the module" +
                            (prefix.empty() ? "" : " (under prefix \"" + prefix + "\")"));
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, target] : targets) {
    const torch::Tensor source = stored.at(prefix + name);
    torch::Tensor writable = target;
    writable.copy_(source);
  }
}

Checkpoint& Checkpoint::addOptimizer(const torch::optim::Optimizer& optimizer,
                                     const std::string& name) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  files[name] = bytes.str();
  return *this;
}

void Checkpoint::restoreOptimizer(torch::optim::Optimizer& optimizer,
                                  const std::string& name) const {
  const auto it = files.find(name);
  if (it == files.end()) {
    throw CheckpointError("the checkpoint has no file \"" + name +
                          "\" with an optimizer's state (addOptimizer writes it)");
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(it->second.data(), it->second.size());
    optimizer.load(archive);
    restoreOptions(optimizer, archive);
  } catch (const c10::Error& e) {
    throw CheckpointError("file \"" + name +
                          "\" does not load into the optimizer: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw CheckpointError("file \"" + name + "\" does not load into the optimizer: " + e.what());
  }
}

void Checkpoint::captureRng() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  const torch::Tensor bytes = generator.get_state().contiguous();
  state.rng_state.assign(static_cast<const char*>(bytes.data_ptr()),
                         static_cast<size_t>(bytes.nbytes()));
}

void Checkpoint::restoreRng() const {
  if (state.rng_state.empty()) {
    throw CheckpointError("state.rng_state is empty: call captureRng() before saving");
  }
  torch::Tensor bytes = torch::empty({static_cast<int64_t>(state.rng_state.size())}, torch::kUInt8);
  std::memcpy(bytes.data_ptr(), state.rng_state.data(), state.rng_state.size());
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(bytes);
  } catch (const c10::Error& e) {
    throw CheckpointError("state.rng_state (" + std::to_string(state.rng_state.size()) +
                          " bytes) is not a CPU generator's state: " + e.what_without_backtrace());
  }
}

void Checkpoint::setSampler(const SamplerState& sampler) {
  state.epoch = static_cast<uint64_t>(sampler.epoch);
  state.sampler_cursor = static_cast<uint64_t>(sampler.cursor);
}

SamplerState Checkpoint::sampler() const {
  return {static_cast<int64_t>(state.epoch), static_cast<int64_t>(state.sampler_cursor)};
}

torch::Tensor Checkpoint::tensor(const std::string& name) const {
  for (const auto& [key, value] : tensors) {
    if (key == name) return value;
  }
  return {};
}

}  // namespace cumulus
