#include "checkpoint/checkpoint_snapshot.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "base/integer.h"
#include "checkpoint/torch_pickle.h"

namespace cumulus::checkpoint {
namespace {

c10::Dict<std::string, at::Tensor> toDict(const NamedTensors& tensors, const char* what) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      throw std::invalid_argument(std::string(what) + " tensor \"" + name + "\" is undefined");
    }
    if (!tensor.device().is_cpu()) {
      throw std::invalid_argument(std::string(what) + " tensor \"" + name +
                                  "\" is not on the CPU; snapshot it with cloneTensors");
    }
    if (dict.contains(name)) {
      throw std::invalid_argument(std::string(what) + " tensor \"" + name + "\" appears twice");
    }
    dict.insert(name, tensor);
  }
  return dict;
}

std::string pickle(const c10::IValue& value) {
  const std::vector<char> bytes = checkpoint::pickleForPython(value);
  return std::string(bytes.data(), bytes.size());
}

c10::IValue unpickle(const std::string& bytes) {
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
}

NamedTensors tensorsOf(const c10::IValue& value) {
  if (!value.isGenericDict()) throw std::runtime_error("expected a dict of tensors");
  NamedTensors out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      throw std::runtime_error("expected a dict from str to Tensor");
    }
    out.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
  }
  return out;
}

// Runs `decode`, turning any failure into an error that names the file.
template <typename Fn>
void decodeFile(const std::string& path, const char* what, Fn&& decode) {
  try {
    decode();
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": not " + what + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not " + what + ": " + e.what());
  }
}

bool isReservedName(const std::string& name) {
  return name == kModelFile || name == kOptimizerFile || name == kStateFile || name == "MANIFEST";
}

const std::string& fileOf(const std::map<std::string, std::string>& files, const char* name,
                          const std::string& dir, const std::string& separator) {
  const auto it = files.find(name);
  if (it == files.end()) throw std::runtime_error(dir + separator + name + ": missing");
  return it->second;
}

}  // namespace

void checkExtraFileName(const std::string& name) {
  const bool valid =
      !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
      });
  if (!valid) {
    throw std::invalid_argument("checkpoint file name \"" + name +
                                "\" is not allowed: use [A-Za-z0-9_.-], not starting with '.'");
  }
  if (isReservedName(name)) {
    throw std::invalid_argument("checkpoint file name \"" + name +
                                "\" is reserved (model.pt, optim.pt, state.pb and MANIFEST are "
                                "the checkpoint's own): choose another");
  }
}

NamedTensors cloneTensors(const NamedTensors& tensors) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    out.emplace_back(name, tensor.detach().to(torch::kCPU).clone(at::MemoryFormat::Contiguous));
  }
  return out;
}

void addOptimizerState(const OptimizerState& state, const std::vector<std::string>& param_names,
                       CheckpointSnapshot& snapshot) {
  for (const auto& [key, tensor] : state.tensors) {
    const size_t dot = key.find('.');
    // Keys are "<parameter index>.<state name>"; anything else is rejected just below, with the
    // key in the message, so a prefix that does not parse leaves `index` out of range.
    const size_t index =
        base::parseUnsigned(std::string_view(key).substr(0, dot)).value_or(param_names.size());
    if (dot == std::string::npos || index >= param_names.size()) {
      throw std::invalid_argument("optimizer state key \"" + key + "\" names no parameter (" +
                                  std::to_string(param_names.size()) + " parameters)");
    }
    snapshot.optimizer_tensors.emplace_back(param_names[index] + key.substr(dot), tensor);
  }
  snapshot.optimizer_scalars["name"] = state.name;
  snapshot.optimizer_scalars["step"] = static_cast<int64_t>(state.step);
}

OptimizerState optimizerStateFrom(const CheckpointSnapshot& snapshot,
                                  const std::vector<std::string>& param_names) {
  OptimizerState state;
  const auto name = snapshot.optimizer_scalars.find("name");
  const auto step = snapshot.optimizer_scalars.find("step");
  if (name == snapshot.optimizer_scalars.end() ||
      !std::holds_alternative<std::string>(name->second)) {
    throw std::invalid_argument("optimizer state: scalar \"name\" missing or not a string");
  }
  if (step == snapshot.optimizer_scalars.end() || !std::holds_alternative<int64_t>(step->second)) {
    throw std::invalid_argument("optimizer state: scalar \"step\" missing or not an integer");
  }
  state.name = std::get<std::string>(name->second);
  state.step = std::get<int64_t>(step->second);
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < param_names.size(); ++i) index_of.emplace(param_names[i], i);
  for (const auto& [key, tensor] : snapshot.optimizer_tensors) {
    // Slot names hold no dot; parameter names do ("fc1.weight"), so split at the last one.
    const size_t dot = key.rfind('.');
    const auto it = dot == std::string::npos ? index_of.end() : index_of.find(key.substr(0, dot));
    if (it == index_of.end()) {
      throw std::invalid_argument("optimizer state tensor \"" + key +
                                  "\" belongs to no parameter of this model");
    }
    state.tensors[std::to_string(it->second) + key.substr(dot)] = tensor;
  }
  return state;
}

std::map<std::string, std::string> encodeSnapshot(const CheckpointSnapshot& snapshot) {
  std::map<std::string, std::string> files;
  files[kModelFile] = pickle(c10::IValue(toDict(snapshot.model, "model")));

  c10::impl::GenericDict scalars(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [key, value] : snapshot.optimizer_scalars) {
    std::visit([&, &key = key](const auto& v) { scalars.insert(key, c10::IValue(v)); }, value);
  }
  c10::impl::GenericDict optim(c10::StringType::get(), c10::AnyType::get());
  optim.insert("tensors", c10::IValue(toDict(snapshot.optimizer_tensors, "optimizer")));
  optim.insert("scalars", c10::IValue(scalars));
  files[kOptimizerFile] = pickle(c10::IValue(optim));

  proto::CheckpointState state = snapshot.state;
  state.set_format_version(kCheckpointFormatVersion);
  std::string state_bytes;
  if (!state.SerializeToString(&state_bytes)) {
    throw std::invalid_argument("checkpoint state does not serialize");
  }
  files[kStateFile] = std::move(state_bytes);
  for (const auto& [name, bytes] : snapshot.files) {
    checkExtraFileName(name);
    files[name] = bytes;
  }
  return files;
}

CheckpointSnapshot decodeSnapshot(const std::map<std::string, std::string>& files,
                                  const std::string& dir, const std::string& separator) {
  CheckpointSnapshot snapshot;
  const std::string model_path = dir + separator + kModelFile;
  decodeFile(model_path, "a state_dict file", [&] {
    snapshot.model = tensorsOf(unpickle(fileOf(files, kModelFile, dir, separator)));
  });
  const std::string optim_path = dir + separator + kOptimizerFile;
  decodeFile(optim_path, "an optimizer state file", [&] {
    const c10::IValue value = unpickle(fileOf(files, kOptimizerFile, dir, separator));
    if (!value.isGenericDict()) throw std::runtime_error("expected a dict");
    const auto dict = value.toGenericDict();
    if (!dict.contains("tensors") || !dict.contains("scalars")) {
      throw std::runtime_error("expected keys \"tensors\" and \"scalars\"");
    }
    snapshot.optimizer_tensors = tensorsOf(dict.at("tensors"));
    const c10::IValue scalars = dict.at("scalars");
    if (!scalars.isGenericDict()) throw std::runtime_error("\"scalars\" is not a dict");
    for (const auto& entry : scalars.toGenericDict()) {
      const std::string key = entry.key().toStringRef();
      const c10::IValue& v = entry.value();
      if (v.isInt()) {
        snapshot.optimizer_scalars[key] = v.toInt();
      } else if (v.isDouble()) {
        snapshot.optimizer_scalars[key] = v.toDouble();
      } else if (v.isString()) {
        snapshot.optimizer_scalars[key] = v.toStringRef();
      } else {
        throw std::runtime_error("scalar \"" + key + "\" is a " + v.tagKind());
      }
    }
  });
  const std::string state_path = dir + separator + kStateFile;
  if (!snapshot.state.ParseFromString(fileOf(files, kStateFile, dir, separator))) {
    throw std::runtime_error(state_path + ": not a CheckpointState message");
  }
  if (snapshot.state.format_version() != kCheckpointFormatVersion) {
    throw std::runtime_error(state_path + ": format version " +
                             std::to_string(snapshot.state.format_version()) +
                             ", this build reads " + std::to_string(kCheckpointFormatVersion));
  }
  for (const auto& [name, bytes] : files) {
    if (!isReservedName(name)) snapshot.files.emplace(name, bytes);
  }
  return snapshot;
}

}  // namespace cumulus::checkpoint
