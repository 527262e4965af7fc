#pragma once
// The model registry. A Model is forward(x) -> outputs (logits, say) over either a C++ torch::nn
// module or a TorchScript module loaded from a torch.jit.save file; the trainer sees only this
// interface.
//
//   mlp                 flatten (any input_shape) -> [Linear, ReLU, (Dropout)] per hidden
//                       width -> Linear;
//                       parameters "layers.<i>.weight|bias" (a Python nn.Sequential's indices)
//   convnet             conv5x5x32 'same' -> ReLU -> pool2 -> conv5x5x64 -> ReLU -> pool2 ->
//                       Linear 1024 -> ReLU -> Dropout(spec.dropout) -> Linear num_classes;
//                       parameters conv1.*, conv2.*, fc1.*, fc2.*
//   torchscript:<path>  torch::jit::load(path); names from named_parameters(recurse)
// Initialization draws from torch's global generator: seed it before makeModel. A Model is not
// thread-safe; the tensors that namedParameters() returns alias the model's own.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cumulus::models {

struct ModelSpec {
  std::string name = "mlp";  // "mlp", "convnet", "torchscript:<path>"
  std::vector<int64_t> hidden = {256, 128, 100};
  double dropout = 0.0;
  std::vector<int64_t> input_shape = {1, 28, 28};  // one sample: C, H, W (mlp: any shape)
  int64_t num_classes = 10;
};

class Model {
 public:
  virtual ~Model() = default;
  // x: a batch [N, ...]; returns outputs [N, ...] (a built-in model: float32 [N, input_shape...]
  // to logits [N, num_classes]). A built-in model throws std::invalid_argument if x is not
  // [N, input_shape...]; a TorchScript one throws std::runtime_error with the path and the
  // interpreter's one-line reason.
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // For loss.name module: the model's own loss, forward(x, targets), a scalar (its mean over the
  // batch). A TorchScript model throws std::runtime_error with the path and the reason when its
  // forward fails or returns anything but a scalar tensor; the built-in models have no such
  // forward and throw std::invalid_argument.
  virtual torch::Tensor forwardLoss(const torch::Tensor& x, const torch::Tensor& targets);
  // Trainable parameters in registration order, with their state_dict names.
  virtual std::vector<std::pair<std::string, torch::Tensor>> namedParameters() = 0;
  // Non-trainable state (e.g. batch-norm statistics), with their state_dict names.
  virtual std::vector<std::pair<std::string, torch::Tensor>> namedBuffers() = 0;
  virtual void train(bool on) = 0;
  // One line: name, layer shapes, parameter count.
  virtual std::string summary() = 0;

  std::vector<torch::Tensor> parameters();
  int64_t parameterCount();
};

// Throws std::invalid_argument naming an unknown model and listing the known ones, or a
// TorchScript file that cannot be loaded (with its path and the reason).
std::unique_ptr<Model> makeModel(const ModelSpec& spec);

// Names accepted by makeModel, for help texts and "did you mean".
std::vector<std::string> modelNames();

}  // namespace cumulus::models
