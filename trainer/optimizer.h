#pragma once
// Optimizers over a fixed list of parameter tensors, with state that can be exported and imported
// bit-exactly (for resumable checkpoints).
//
// The parameters, their gradients and the optimizer's state live in flat buffers
// (flat_parameters.h): a step is one fused pass per buffer (optimizer_kernels.h), not a handful
// of operations per tensor. The exported state is per parameter all the same, with torch.optim's
// names and each parameter's shape.
//
// The update rules are torch.optim's (dampening 0), written out here so that every piece of
// state is ours to save:
//   SGD:   d = g + wd * w;  buf = d on the first step, else buf = momentum * buf + d;
//          d = nesterov ? d + momentum * buf : buf  (momentum > 0);  w -= lr * d
//   AdamW: w *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  t += 1;
//          w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// The learning rate is an argument of step(), so schedules stay pure functions of the step.
// Every parameter must have a defined .grad() at step() (the trainer zero-fills gradients, so a
// parameter that got no gradient still takes its weight-decay and momentum update, as in a
// replica that received zero from the all-reduce). Not thread-safe.
//
// Results: the same formulas in the same float32 order per element as LibTorch's operations
// (makePerTensorOptimizer), without fused multiply-adds; LibTorch's vectorized add with an alpha
// uses an FMA, so the two agree to an ulp or so per step, not always bit for bit. The flat
// optimizer's own results do not depend on the thread count or the bucket layout.

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/optimizer_state.h"
#include "configs/experiment.h"
#include "distributed/flat_parameters.h"

namespace cumulus::trainer {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update with learning rate `lr` from each parameter's .grad(), in place, under
  // no-grad. Throws std::logic_error if a parameter has no gradient.
  virtual void step(double lr) = 0;
  int64_t stepCount() const { return step_; }
  // Deep copies: later steps do not change an exported state.
  virtual checkpoint::OptimizerState exportState() const = 0;
  // Throws std::invalid_argument if the state belongs to another optimizer, names a parameter
  // index out of range or a slot this optimizer does not have, or holds a tensor whose shape or
  // dtype differs from its parameter's. On a throw the optimizer is unchanged.
  virtual void importState(const checkpoint::OptimizerState& state) = 0;

 protected:
  int64_t step_ = 0;
};

// Throws std::invalid_argument for an out-of-range hyper-parameter
// (momentum outside [0, 1), nesterov without momentum, negative weight decay, betas outside
// [0, 1), eps <= 0).
std::unique_ptr<Optimizer> makeFlatOptimizer(const configs::OptimizerConfig& config,
                                             std::shared_ptr<distributed::FlatParameters> params);
// Lays `params` out flat first (FlatParameters, one bucket per dtype): the tensors are re-pointed
// at the flat buffers, and keep their values.
std::unique_ptr<Optimizer> makeOptimizer(const configs::OptimizerConfig& config,
                                         std::vector<torch::Tensor> params);
// The same rules as LibTorch operations on each parameter tensor (the implementation before
// the flat one): the reference that tests and benchmarks compare against. Same errors.
std::unique_ptr<Optimizer> makePerTensorOptimizer(const configs::OptimizerConfig& config,
                                                  std::vector<torch::Tensor> params);

// Scales every gradient by max_norm / (total_norm + 1e-6) when the global L2 norm over all
// gradients exceeds max_norm (torch.nn.utils.clip_grad_norm_). Returns the norm before clipping.
// Parameters without a gradient are skipped.
double clipGradNorm(const std::vector<torch::Tensor>& params, double max_norm);
// The same over flat gradients: one pass per bucket for the norm (its summation order fixed by
// the layout, not the thread count), one mul_ per bucket to clip.
double clipGradNorm(distributed::FlatParameters& params, double max_norm);

}  // namespace cumulus::trainer
