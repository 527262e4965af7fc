// The C++ model families: mlp and convnet, built from torch::nn modules whose registration
// names give state_dict-style parameter names ("layers.0.weight", "conv1.bias", ...), the same
// names the equivalent Python module would have.
#include "models/builtin.h"

#include <torch/nn.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

namespace cumulus::models {
namespace {

// The mlp flattens whatever one sample is ([13], [1, 28, 28], ...); the convnet wants (C, H, W).
void checkSpec(const ModelSpec& spec, bool images) {
  const auto& s = spec.input_shape;
  const bool positive = std::all_of(s.begin(), s.end(), [](int64_t d) { return d > 0; });
  if (images && (s.size() != 3 || !positive)) {
    throw std::invalid_argument("model \"" + spec.name +
                                "\": input_shape must be 3 positive sizes (C, H, W)");
  }
  if (s.empty() || !positive) {
    throw std::invalid_argument("model \"" + spec.name +
                                "\": input_shape must be one or more positive sizes");
  }
  if (spec.num_classes <= 0) {
    throw std::invalid_argument("model \"" + spec.name + "\": num_classes must be positive, got " +
                                std::to_string(spec.num_classes));
  }
  if (!(spec.dropout >= 0.0 && spec.dropout < 1.0)) {
    throw std::invalid_argument("model \"" + spec.name + "\": dropout must lie in [0, 1), got " +
                                std::to_string(spec.dropout));
  }
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string out;
  for (const int64_t d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

std::string dropoutText(double p) {
  if (p == 0.0) return "";
  std::ostringstream s;
  s << ", dropout " << p;
  return s.str();
}

// A user error, not an invariant: the dataset and the model spec disagree.
void checkInput(const torch::Tensor& x, const ModelSpec& spec) {
  const auto& s = spec.input_shape;
  if (x.dim() != static_cast<int64_t>(s.size()) + 1 || x.sizes().slice(1) != c10::IntArrayRef(s)) {
    std::ostringstream msg;
    msg << "model \"" << spec.name << "\" expects input [N";
    for (const int64_t d : s) msg << ", " << d;
    msg << "] (model.input_shape), got " << x.sizes();
    throw std::invalid_argument(msg.str());
  }
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

class MlpNet : public torch::nn::Module {
 public:
  explicit MlpNet(const ModelSpec& spec) {
    layers_ = register_module("layers", torch::nn::Sequential());
    int64_t width = product(spec.input_shape);
    for (const int64_t hidden : spec.hidden) {
      layers_->push_back(torch::nn::Linear(width, hidden));
      layers_->push_back(torch::nn::ReLU());
      if (spec.dropout > 0.0) layers_->push_back(torch::nn::Dropout(spec.dropout));
      width = hidden;
    }
    layers_->push_back(torch::nn::Linear(width, spec.num_classes));
  }
  torch::Tensor forward(const torch::Tensor& x) { return layers_->forward(x.flatten(1)); }

 private:
  torch::nn::Sequential layers_{nullptr};
};

// The TensorFlow "Build a CNN" tutorial network: two 5x5 'same' convolutions (32 and 64 maps),
// each followed by ReLU and a 2x2 max-pool, a 1024-unit dense layer, dropout, and the logits.
class ConvNet : public torch::nn::Module {
 public:
  explicit ConvNet(const ModelSpec& spec) {
    const int64_t c = spec.input_shape[0];
    const int64_t h = spec.input_shape[1] / 4;  // two floor-halving pools
    const int64_t w = spec.input_shape[2] / 4;
    conv1_ =
        register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(c, 32, 5).padding(2)));
    conv2_ =
        register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 5).padding(2)));
    fc1_ = register_module("fc1", torch::nn::Linear(64 * h * w, 1024));
    dropout_ = register_module("dropout", torch::nn::Dropout(spec.dropout));
    fc2_ = register_module("fc2", torch::nn::Linear(1024, spec.num_classes));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);
    y = torch::max_pool2d(torch::relu(conv2_->forward(y)), 2);
    y = torch::relu(fc1_->forward(y.flatten(1)));
    return fc2_->forward(dropout_->forward(y));
  }

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Linear fc2_{nullptr};
};

template <typename Net>
class NativeModel : public Model {
 public:
  NativeModel(const ModelSpec& spec, std::string description)
      : spec_(spec), net_(std::make_shared<Net>(spec)), description_(std::move(description)) {}

  torch::Tensor forward(const torch::Tensor& x) override {
    checkInput(x, spec_);
    return net_->forward(x);
  }
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : net_->named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }
  std::vector<std::pair<std::string, torch::Tensor>> namedBuffers() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : net_->named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }
  void train(bool on) override { net_->train(on); }
  std::string summary() override {
    return description_ + ", " + groupThousands(parameterCount()) + " parameters";
  }

 private:
  ModelSpec spec_;
  std::shared_ptr<Net> net_;
  std::string description_;
};

}  // namespace

std::unique_ptr<Model> makeMlp(const ModelSpec& spec) {
  checkSpec(spec, /*images=*/false);
  std::string widths = std::to_string(product(spec.input_shape));
  for (const int64_t h : spec.hidden) {
    if (h <= 0) {
      throw std::invalid_argument("model \"mlp\": hidden widths must be positive, got " +
                                  std::to_string(h));
    }
    widths += "-" + std::to_string(h);
  }
  widths += "-" + std::to_string(spec.num_classes);
  return std::make_unique<NativeModel<MlpNet>>(spec, "mlp " + widths + dropoutText(spec.dropout));
}

std::unique_ptr<Model> makeConvnet(const ModelSpec& spec) {
  checkSpec(spec, /*images=*/true);
  if (spec.input_shape[1] < 4 || spec.input_shape[2] < 4) {
    throw std::invalid_argument("model \"convnet\": input_shape " + shapeText(spec.input_shape) +
                                " is too small for two 2x2 pools (H and W must be at least 4)");
  }
  return std::make_unique<NativeModel<ConvNet>>(
      spec, "convnet " + shapeText(spec.input_shape) + " conv5x5x32-pool-conv5x5x64-pool-1024-" +
                std::to_string(spec.num_classes) + dropoutText(spec.dropout));
}

}  // namespace cumulus::models
