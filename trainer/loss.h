#pragma once
// Loss: what training minimizes (the experiment's loss.name), one contract for every kind. Given
// a batch of n samples it runs the model and returns the SUM over the samples of each sample's
// mean loss, a scalar tensor that backward() can start from. The training loop divides that sum
// by the global batch's sample count (data_parallel.h), so the gradients summed over ranks are
// those of the mean over the global batch; the evaluator divides the summed sums by the test
// set's size, giving the mean per-sample loss (for a language model, nats per token).
//
//   cross_entropy  outputs [B, C] (logits) against int64 class ids [B]: the summed
//                  cross-entropy; or outputs [B, T, V] against token ids [B, T]: each sample's
//                  mean over its T tokens, summed. Accuracy: the share of arg-max predictions
//                  that are right, over samples or over tokens.
//   mse            outputs and targets of one shape [B, ...] (targets are converted to the
//                  outputs' dtype): each sample's mean squared error over its elements, summed.
//                  No accuracy.
//   module         the model's own forwardLoss(inputs, targets), a scalar mean over the n samples,
//                  times n. No accuracy.
//
// Precision (trainer.precision, <cumulus/precision.h>): with bf16 the model's forward (a module
// loss's forwardLoss too) runs under bfloat16 autocast, and its outputs come back to float32
// before the loss, which is always computed in float32.
//
// Errors: outputs and targets whose shapes or dtypes do not fit the loss throw
// std::invalid_argument naming the loss and both shapes; a model's failure passes through as it
// is (models/model.h). Immutable after construction; thread-compatible.

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "configs/experiment.h"
#include "cumulus/options.h"
#include "data/examples.h"

namespace cumulus::models {
class Model;
}

namespace cumulus::trainer {

struct LossResult {
  torch::Tensor sum;        // scalar: Σ over the batch's samples of each sample's mean loss
  int64_t correct = 0;      // with accuracy (Loss::hasAccuracy() and asked for): right predictions
  int64_t predictions = 0;  // of how many (samples for [B, C], tokens for [B, T, V])
};

class Loss {
 public:
  using Kind = configs::LossName;  // kCrossEntropy, kMse, kModule: loss.name

  // `precision` is kFp32 or kBf16 (choosePrecision's answer), never kAuto.
  static Loss named(Kind kind, Precision precision = Precision::kFp32);

  Kind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  // Whether accuracy means something for this loss (class ids and tokens, not mse or module).
  bool hasAccuracy() const { return kind_ == Kind::kCrossEntropy; }
  Precision precision() const { return precision_; }

  // The model's forward of `inputs` in this precision; floating-point outputs come back as
  // float32.
  torch::Tensor forward(models::Model& model, const torch::Tensor& inputs) const;

  // Forward of `model` on batch.inputs, then the loss against batch.targets (module: the model's
  // forwardLoss). `count_correct` (with hasAccuracy()) fills correct and predictions.
  LossResult apply(models::Model& model, const data::Batch& batch,
                   bool count_correct = false) const;

  // The sum for outputs the caller already has (cross_entropy and mse; module throws
  // std::logic_error: it needs the model).
  torch::Tensor sumOf(const torch::Tensor& outputs, const torch::Tensor& targets) const;

 private:
  Loss(Kind kind, std::string name, Precision precision)
      : kind_(kind), name_(std::move(name)), precision_(precision) {}
  torch::Tensor crossEntropySum(const torch::Tensor& outputs, const torch::Tensor& targets) const;
  torch::Tensor mseSum(const torch::Tensor& outputs, const torch::Tensor& targets) const;

  Kind kind_;
  std::string name_;
  Precision precision_;
};

// For messages: numpy's name of the tensor's dtype and its shape, "float32 [1, 13]".
std::string tensorText(const torch::Tensor& t);

}  // namespace cumulus::trainer
