#include "trainer/loss.h"

#include <torch/torch.h>

#include <sstream>
#include <stdexcept>

#include "cumulus/precision.h"
#include "models/model.h"

namespace cumulus::trainer {
namespace {

std::string shapeOf(const torch::Tensor& t) {
  std::ostringstream text;
  text << t.sizes();
  return text.str();
}

[[noreturn]] void mismatch(const std::string& loss, const torch::Tensor& outputs,
                           const torch::Tensor& targets, const std::string& wants) {
  throw std::invalid_argument("loss.name " + loss + ": outputs " + shapeOf(outputs) +
                              " and targets " + shapeOf(targets) + " do not match; " + loss +
                              " wants " + wants);
}

// numpy's spelling, which users of .npy files know: "float32", not LibTorch's "Float".
std::string dtypeText(torch::ScalarType type) {
  switch (type) {
    case torch::kUInt8:
      return "uint8";
    case torch::kInt8:
      return "int8";
    case torch::kInt16:
      return "int16";
    case torch::kInt32:
      return "int32";
    case torch::kInt64:
      return "int64";
    case torch::kFloat16:
      return "float16";
    case torch::kFloat32:
      return "float32";
    case torch::kFloat64:
      return "float64";
    case torch::kBool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

// Outputs of a bf16 forward, back to float32 for the loss; other dtypes as they are.
torch::Tensor asFloat32(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? t.to(torch::kFloat32) : t;
}

}  // namespace

std::string tensorText(const torch::Tensor& t) {
  return dtypeText(t.scalar_type()) + " " + shapeOf(t);
}

Loss Loss::named(Kind kind, Precision precision) {
  if (precision == Precision::kAuto) {
    throw std::logic_error("Loss::named: choose the precision first (choosePrecision)");
  }
  return Loss(kind, base::nameOf(kind), precision);
}

torch::Tensor Loss::forward(models::Model& model, const torch::Tensor& inputs) const {
  torch::Tensor outputs;
  {
    Autocast autocast(precision_);
    outputs = model.forward(inputs);
  }
  return asFloat32(outputs);
}

LossResult Loss::apply(models::Model& model, const data::Batch& batch, bool count_correct) const {
  LossResult result;
  if (kind_ == Kind::kModule) {
    // The module's mean over the batch, back to the sum over its samples.
    torch::Tensor mean;
    {
      Autocast autocast(precision_);
      mean = model.forwardLoss(batch.inputs, batch.targets);
    }
    result.sum = asFloat32(mean) * static_cast<double>(batch.targets.size(0));
    return result;
  }
  const torch::Tensor outputs = forward(model, batch.inputs);
  result.sum = sumOf(outputs, batch.targets);
  if (count_correct && hasAccuracy()) {
    // [B, C] against [B], or [B, T, V] against [B, T]: the arg-max over the last dimension.
    const torch::Tensor predicted = outputs.argmax(outputs.dim() - 1);
    result.correct = predicted.eq(batch.targets).sum().item<int64_t>();
    result.predictions = batch.targets.numel();
  }
  return result;
}

torch::Tensor Loss::sumOf(const torch::Tensor& outputs, const torch::Tensor& targets) const {
  switch (kind_) {
    case Kind::kCrossEntropy:
      return crossEntropySum(outputs, targets);
    case Kind::kMse:
      return mseSum(outputs, targets);
    case Kind::kModule:
      break;
  }
  throw std::logic_error("Loss::sumOf: loss.name module computes its loss in the model");
}

torch::Tensor Loss::crossEntropySum(const torch::Tensor& outputs,
                                    const torch::Tensor& targets) const {
  const auto sum = torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum);
  const bool classes = outputs.dim() == 2 && targets.dim() == 1;
  const bool tokens = outputs.dim() == 3 && targets.dim() == 2;
  if ((!classes && !tokens) || outputs.size(0) != targets.size(0) ||
      (tokens && outputs.size(1) != targets.size(1))) {
    mismatch(name_, outputs, targets, "[B, C] with targets [B], or [B, T, V] with [B, T]");
  }
  if (targets.scalar_type() != torch::kInt64) {
    throw std::invalid_argument("loss.name " + name_ + ": targets " + shapeOf(targets) + " are " +
                                dtypeText(targets.scalar_type()) +
                                "; cross_entropy wants integer class or token ids");
  }
  if (classes) return torch::nn::functional::cross_entropy(outputs, targets, sum);
  // Each sample's mean over its T tokens, summed over the samples: the sum over all tokens / T.
  const int64_t steps = outputs.size(1);
  return torch::nn::functional::cross_entropy(outputs.reshape({-1, outputs.size(2)}),
                                              targets.reshape({-1}), sum) /
         static_cast<double>(steps);
}

torch::Tensor Loss::mseSum(const torch::Tensor& outputs, const torch::Tensor& targets) const {
  if (outputs.dim() < 1 || outputs.sizes() != targets.sizes()) {
    mismatch(name_, outputs, targets, "outputs and targets of one shape [B, ...]");
  }
  if (!outputs.is_floating_point()) {
    throw std::invalid_argument("loss.name " + name_ + ": outputs " + shapeOf(outputs) + " are " +
                                dtypeText(outputs.scalar_type()) +
                                "; mse wants floating-point outputs");
  }
  // Each sample's mean over its elements, summed over the samples.
  const int64_t per_sample = outputs.size(0) > 0 ? outputs.numel() / outputs.size(0) : 1;
  return torch::mse_loss(outputs, targets.to(outputs.scalar_type()), at::Reduction::Sum) /
         static_cast<double>(std::max<int64_t>(per_sample, 1));
}

}  // namespace cumulus::trainer
