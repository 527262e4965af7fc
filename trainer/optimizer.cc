#include "trainer/optimizer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

#include "base/integer.h"
#include "trainer/optimizer_kernels.h"

namespace cumulus::trainer {
namespace {

std::string slotKey(size_t index, const std::string& slot) {
  return std::to_string(index) + "." + slot;
}

// "<param index>.<slot>" → (index, slot); throws std::invalid_argument for a malformed key or an
// index past `params`.
std::pair<size_t, std::string> parseKey(const std::string& key, size_t params) {
  const auto dot = key.find('.');
  const std::optional<uint64_t> parsed = base::parseUnsigned(std::string_view(key).substr(0, dot));
  if (!parsed) throw std::invalid_argument("optimizer state: malformed key \"" + key + "\"");
  const size_t index = static_cast<size_t>(*parsed);
  if (dot == std::string::npos || index >= params) {
    throw std::invalid_argument("optimizer state: key \"" + key + "\" names no parameter (" +
                                std::to_string(params) + " parameters)");
  }
  return {index, key.substr(dot + 1)};
}

void checkMatches(const std::string& key, const torch::Tensor& tensor, const torch::Tensor& param,
                  size_t index) {
  if (tensor.sizes() != param.sizes() || tensor.dtype() != param.dtype()) {
    throw std::invalid_argument("optimizer state: \"" + key + "\" does not match parameter " +
                                std::to_string(index) + "'s shape or dtype");
  }
}

void checkName(const checkpoint::OptimizerState& state, const std::string& name) {
  if (state.name != name) {
    throw std::invalid_argument("optimizer state is for \"" + state.name + "\", not \"" + name +
                                "\"");
  }
}

SgdArgs sgdArgs(const configs::OptimizerConfig& c) {
  SgdArgs a;
  a.momentum = c.momentum;
  a.nesterov = c.nesterov;
  a.weight_decay = c.weight_decay;
  return a;
}

AdamWArgs adamwArgs(const configs::OptimizerConfig& c) {
  AdamWArgs a;
  a.beta1 = c.beta1;
  a.beta2 = c.beta2;
  a.eps = c.eps;
  a.weight_decay = c.weight_decay;
  return a;
}

// The flat optimizers' state: per slot name, one flat tensor per bucket (allocated, zero, when
// first needed) and per parameter whether its slice holds state yet (what exportState lists).
class FlatOptimizer : public Optimizer {
 public:
  FlatOptimizer(std::string name, std::shared_ptr<distributed::FlatParameters> flat,
                std::vector<std::string> slots)
      : name_(std::move(name)), flat_(std::move(flat)), slot_names_(std::move(slots)) {
    for (size_t k = 0; k < slot_names_.size(); ++k) {
      state_.emplace_back(flat_->buckets().size());
      present_.emplace_back(flat_->size(), 0);
    }
  }

  void step(double lr) final {
    torch::NoGradGuard no_grad;
    flat_->gatherGradients();
    const std::vector<size_t> moved = flat_->gatherValues();
    for (size_t b = 0; b < flat_->buckets().size(); ++b) update(b, lr);
    flat_->scatterValues(moved);
    ++step_;
  }

  checkpoint::OptimizerState exportState() const override {
    checkpoint::OptimizerState state{name_, step_, {}};
    for (size_t k = 0; k < slot_names_.size(); ++k) {
      for (size_t i = 0; i < flat_->size(); ++i) {
        if (!present_[k][i]) continue;
        state.tensors[slotKey(i, slot_names_[k])] =
            flat_->slice(state_[k][flat_->bucketOf(i)], i).clone();
      }
    }
    return state;
  }

  void importState(const checkpoint::OptimizerState& state) override {
    checkName(state, name_);
    // Everything is checked before anything changes.
    std::vector<std::tuple<size_t, size_t, torch::Tensor>> found;  // slot, param, tensor
    for (const auto& [key, tensor] : state.tensors) {
      const auto [index, slot] = parseKey(key, flat_->size());
      const size_t k = slotIndex(slot);
      if (k == slot_names_.size()) {
        throw std::invalid_argument("optimizer state: \"" + key + "\" is not a slot of " + name_);
      }
      checkMatches(key, tensor, flat_->params()[index], index);
      found.emplace_back(k, index, tensor);
    }
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < slot_names_.size(); ++k) {
      std::fill(present_[k].begin(), present_[k].end(), 0);
      for (torch::Tensor& flat : state_[k]) {
        if (flat.defined()) flat.zero_();
      }
    }
    for (const auto& [k, i, tensor] : found) {
      flat_->slice(stateOf(k, flat_->bucketOf(i)), i).copy_(tensor);
      present_[k][i] = 1;
    }
    step_ = state.step;
  }

 protected:
  virtual void update(size_t bucket, double lr) = 0;

  size_t slotIndex(const std::string& slot) const {
    return static_cast<size_t>(std::find(slot_names_.begin(), slot_names_.end(), slot) -
                               slot_names_.begin());
  }
  torch::Tensor& stateOf(size_t k, size_t bucket) {
    torch::Tensor& flat = state_[k][bucket];
    if (!flat.defined()) flat = torch::zeros_like(flat_->buckets()[bucket].values);
    return flat;
  }
  void markPresent(size_t k, size_t bucket) {
    for (const size_t i : flat_->buckets()[bucket].spec.params) present_[k][i] = 1;
  }

  std::string name_;
  std::shared_ptr<distributed::FlatParameters> flat_;
  std::vector<std::string> slot_names_;
  std::vector<std::vector<torch::Tensor>> state_;  // [slot][bucket]
  std::vector<std::vector<char>> present_;         // [slot][param]
};

class FlatSgd final : public FlatOptimizer {
 public:
  FlatSgd(const configs::OptimizerConfig& c, std::shared_ptr<distributed::FlatParameters> flat)
      : FlatOptimizer("sgd", std::move(flat), {"momentum_buffer"}), args_(sgdArgs(c)) {}

 private:
  void update(size_t b, double lr) override {
    const distributed::FlatParameters::Bucket& bucket = flat_->buckets()[b];
    SgdArgs args = args_;
    args.lr = lr;
    if (args.momentum == 0) {
      run(bucket.values, bucket.grads, torch::Tensor(), args);
      return;
    }
    const torch::Tensor& buf = stateOf(0, b);
    // Runs of parameters that all have a momentum buffer or all lack one (the first step, or an
    // imported state that covers some parameters): the whole bucket, but for such an import.
    const distributed::BucketSpec& spec = bucket.spec;
    size_t s = 0;
    while (s < spec.params.size()) {
      const bool has = present_[0][spec.params[s]] != 0;
      size_t e = s + 1;
      while (e < spec.params.size() && (present_[0][spec.params[e]] != 0) == has) ++e;
      const auto begin = static_cast<int64_t>(spec.offsets[s]);
      const auto end = static_cast<int64_t>(e == spec.params.size() ? spec.numel : spec.offsets[e]);
      args.first = !has;
      if (begin == 0 && end == static_cast<int64_t>(spec.numel)) {
        run(bucket.values, bucket.grads, buf, args);
      } else {
        run(bucket.values.slice(0, begin, end), bucket.grads.slice(0, begin, end),
            buf.slice(0, begin, end), args);
      }
      s = e;
    }
    markPresent(0, b);
  }

  static void run(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& buf,
                  const SgdArgs& args) {
    if (hasFusedKernel(w.scalar_type())) {
      sgdFused(w, g, buf, args);
    } else {
      sgdOps(w, g, buf, args);
    }
  }

  const SgdArgs args_;
};

class FlatAdamW final : public FlatOptimizer {
 public:
  FlatAdamW(const configs::OptimizerConfig& c, std::shared_ptr<distributed::FlatParameters> flat)
      : FlatOptimizer("adamw", std::move(flat), {"exp_avg", "exp_avg_sq"}), args_(adamwArgs(c)) {}

 private:
  void update(size_t b, double lr) override {
    const distributed::FlatParameters::Bucket& bucket = flat_->buckets()[b];
    AdamWArgs args = args_;
    args.lr = lr;
    args.step = step_ + 1;
    const torch::Tensor& m = stateOf(0, b);
    const torch::Tensor& v = stateOf(1, b);
    if (hasFusedKernel(bucket.values.scalar_type())) {
      adamwFused(bucket.values, bucket.grads, m, v, args);
    } else {
      adamwOps(bucket.values, bucket.grads, m, v, args);
    }
    markPresent(0, b);
    markPresent(1, b);
  }

  const AdamWArgs args_;
};

// The per-tensor implementation: LibTorch operations on each parameter and its .grad().
class PerTensorOptimizer final : public Optimizer {
 public:
  PerTensorOptimizer(const configs::OptimizerConfig& c, std::vector<torch::Tensor> params)
      : kind_(c.name),
        name_(base::nameOf(c.name)),
        params_(std::move(params)),
        sgd_(sgdArgs(c)),
        adamw_(adamwArgs(c)) {}

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      const torch::Tensor& param = params_[i];
      const torch::Tensor& grad = param.grad();
      if (!grad.defined()) {
        throw std::logic_error("optimizer step: parameter " + std::to_string(i) +
                               " has no gradient");
      }
      if (kind_ == configs::OptimizerName::kSgd) {
        SgdArgs args = sgd_;
        args.lr = lr;
        torch::Tensor buf;
        if (args.momentum != 0) {
          torch::Tensor& slot = slots_[slotKey(i, "momentum_buffer")];
          args.first = !slot.defined();
          if (args.first) slot = torch::empty_like(param);
          buf = slot;
        }
        sgdOps(param, grad, buf, args);
      } else {
        AdamWArgs args = adamw_;
        args.lr = lr;
        args.step = step_ + 1;
        torch::Tensor& m = slots_[slotKey(i, "exp_avg")];
        torch::Tensor& v = slots_[slotKey(i, "exp_avg_sq")];
        if (!m.defined()) m = torch::zeros_like(param);
        if (!v.defined()) v = torch::zeros_like(param);
        adamwOps(param, grad, m, v, args);
      }
    }
    ++step_;
  }

  checkpoint::OptimizerState exportState() const override {
    checkpoint::OptimizerState state{name_, step_, {}};
    for (const auto& [key, tensor] : slots_) state.tensors[key] = tensor.detach().clone();
    return state;
  }

  void importState(const checkpoint::OptimizerState& state) override {
    checkName(state, name_);
    std::map<std::string, torch::Tensor> slots;
    for (const auto& [key, tensor] : state.tensors) {
      const size_t index = parseKey(key, params_.size()).first;
      checkMatches(key, tensor, params_[index], index);
      slots[key] = tensor.detach().clone();
    }
    slots_ = std::move(slots);
    step_ = state.step;
  }

 private:
  configs::OptimizerName kind_;
  std::string name_;
  std::vector<torch::Tensor> params_;
  SgdArgs sgd_;
  AdamWArgs adamw_;
  std::map<std::string, torch::Tensor> slots_;
};

void checkRange(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// Throws for an out-of-range hyper-parameter (optimizer.h).
void checkConfig(const configs::OptimizerConfig& config) {
  checkRange(config.weight_decay >= 0, "optimizer.weight_decay: must be >= 0");
  if (config.name == configs::OptimizerName::kSgd) {
    checkRange(config.momentum >= 0 && config.momentum < 1,
               "optimizer.momentum: must be in [0, 1)");
    checkRange(!config.nesterov || config.momentum > 0,
               "optimizer.nesterov: needs optimizer.momentum > 0");
    return;
  }
  checkRange(config.beta1 >= 0 && config.beta1 < 1, "optimizer.beta1: must be in [0, 1)");
  checkRange(config.beta2 >= 0 && config.beta2 < 1, "optimizer.beta2: must be in [0, 1)");
  checkRange(config.eps > 0, "optimizer.eps: must be > 0");
}

}  // namespace

std::unique_ptr<Optimizer> makeFlatOptimizer(const configs::OptimizerConfig& config,
                                             std::shared_ptr<distributed::FlatParameters> params) {
  checkConfig(config);
  if (config.name == configs::OptimizerName::kSgd)
    return std::make_unique<FlatSgd>(config, std::move(params));
  return std::make_unique<FlatAdamW>(config, std::move(params));
}

std::unique_ptr<Optimizer> makeOptimizer(const configs::OptimizerConfig& config,
                                         std::vector<torch::Tensor> params) {
  checkConfig(config);
  return makeFlatOptimizer(config,
                           std::make_shared<distributed::FlatParameters>(std::move(params)));
}

std::unique_ptr<Optimizer> makePerTensorOptimizer(const configs::OptimizerConfig& config,
                                                  std::vector<torch::Tensor> params) {
  checkConfig(config);
  return std::make_unique<PerTensorOptimizer>(config, std::move(params));
}

double clipGradNorm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  // Accumulate squares in double: the norm decides whether to clip, and float32 sums of many
  // squares drift with the summation order.
  double sum_squares = 0;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    sum_squares += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
  }
  const double norm = std::sqrt(sum_squares);
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1.0) {
    for (const auto& p : params) {
      if (p.grad().defined()) p.grad().mul_(scale);
    }
  }
  return norm;
}

double clipGradNorm(distributed::FlatParameters& params, double max_norm) {
  // A gradient that is not its slice (replaced by a caller) is clipped where it is.
  if (!params.gradsInPlace()) return clipGradNorm(params.params(), max_norm);
  torch::NoGradGuard no_grad;
  double sum_squares = 0;
  for (const distributed::FlatParameters::Bucket& bucket : params.buckets()) {
    sum_squares += sumOfSquares(bucket.grads);
  }
  const double norm = std::sqrt(sum_squares);
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1.0) {
    for (const distributed::FlatParameters::Bucket& bucket : params.buckets())
      bucket.grads.mul_(scale);
  }
  return norm;
}

}  // namespace cumulus::trainer
