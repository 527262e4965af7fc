#include "trainer/optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace cumulus::trainer {
namespace {

std::string slotKey(size_t index, const char* slot) { return std::to_string(index) + "." + slot; }

const torch::Tensor& gradOf(const torch::Tensor& param, size_t index) {
  if (!param.grad().defined()) {
    throw std::logic_error("optimizer step: parameter " + std::to_string(index) +
                           " has no gradient");
  }
  return param.grad();
}

// Shared import/export of the per-parameter slot tensors.
class SlotOptimizer : public Optimizer {
 public:
  SlotOptimizer(std::string name, std::vector<torch::Tensor> params)
      : name_(std::move(name)), params_(std::move(params)) {}

  OptimizerState exportState() const override {
    OptimizerState state{name_, step_, {}};
    for (const auto& [key, tensor] : slots_) state.tensors[key] = tensor.detach().clone();
    return state;
  }

  void importState(const OptimizerState& state) override {
    if (state.name != name_) {
      throw std::invalid_argument("optimizer state is for \"" + state.name + "\", not \"" + name_ +
                                  "\"");
    }
    std::map<std::string, torch::Tensor> slots;
    for (const auto& [key, tensor] : state.tensors) {
      const auto dot = key.find('.');
      size_t index = 0;
      try {
        index = std::stoul(key.substr(0, dot));
      } catch (const std::exception&) {
        throw std::invalid_argument("optimizer state: malformed key \"" + key + "\"");
      }
      if (dot == std::string::npos || index >= params_.size()) {
        throw std::invalid_argument("optimizer state: key \"" + key + "\" names no parameter (" +
                                    std::to_string(params_.size()) + " parameters)");
      }
      const auto& param = params_[index];
      if (tensor.sizes() != param.sizes() || tensor.dtype() != param.dtype()) {
        throw std::invalid_argument("optimizer state: \"" + key + "\" does not match parameter " +
                                    std::to_string(index) + "'s shape or dtype");
      }
      slots[key] = tensor.detach().clone();
    }
    slots_ = std::move(slots);
    step_ = state.step;
  }

 protected:
  torch::Tensor& slot(size_t index, const char* name) { return slots_[slotKey(index, name)]; }

  std::string name_;
  std::vector<torch::Tensor> params_;
  std::map<std::string, torch::Tensor> slots_;
};

class Sgd final : public SlotOptimizer {
 public:
  Sgd(const configs::OptimizerConfig& c, std::vector<torch::Tensor> params)
      : SlotOptimizer("sgd", std::move(params)),
        momentum_(c.momentum),
        nesterov_(c.nesterov),
        weight_decay_(c.weight_decay) {}

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& param = params_[i];
      torch::Tensor d = gradOf(param, i);
      if (weight_decay_ != 0) d = d.add(param, weight_decay_);
      if (momentum_ != 0) {
        torch::Tensor& buf = slot(i, "momentum_buffer");
        if (!buf.defined()) {
          buf = d.clone();
        } else {
          buf.mul_(momentum_).add_(d);
        }
        d = nesterov_ ? d.add(buf, momentum_) : buf;
      }
      param.add_(d, -lr);
    }
    ++step_;
  }

 private:
  double momentum_;
  bool nesterov_;
  double weight_decay_;
};

class AdamW final : public SlotOptimizer {
 public:
  AdamW(const configs::OptimizerConfig& c, std::vector<torch::Tensor> params)
      : SlotOptimizer("adamw", std::move(params)),
        beta1_(c.beta1),
        beta2_(c.beta2),
        eps_(c.eps),
        weight_decay_(c.weight_decay) {}

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    const int64_t t = step_ + 1;
    const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(t));
    const double bias2_sqrt = std::sqrt(1.0 - std::pow(beta2_, static_cast<double>(t)));
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& param = params_[i];
      const torch::Tensor& g = gradOf(param, i);
      torch::Tensor& m = slot(i, "exp_avg");
      torch::Tensor& v = slot(i, "exp_avg_sq");
      if (!m.defined()) m = torch::zeros_like(param);
      if (!v.defined()) v = torch::zeros_like(param);
      param.mul_(1.0 - lr * weight_decay_);
      m.mul_(beta1_).add_(g, 1.0 - beta1_);
      v.mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
      const torch::Tensor denom = (v.sqrt() / bias2_sqrt).add_(eps_);
      param.addcdiv_(m, denom, -lr / bias1);
    }
    step_ = t;
  }

 private:
  double beta1_;
  double beta2_;
  double eps_;
  double weight_decay_;
};

void checkRange(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(const configs::OptimizerConfig& config,
                                         std::vector<torch::Tensor> params) {
  checkRange(config.weight_decay >= 0, "optimizer.weight_decay: must be >= 0");
  if (config.name == "sgd") {
    checkRange(config.momentum >= 0 && config.momentum < 1,
               "optimizer.momentum: must be in [0, 1)");
    checkRange(!config.nesterov || config.momentum > 0,
               "optimizer.nesterov: needs optimizer.momentum > 0");
    return std::make_unique<Sgd>(config, std::move(params));
  }
  if (config.name == "adamw") {
    checkRange(config.beta1 >= 0 && config.beta1 < 1, "optimizer.beta1: must be in [0, 1)");
    checkRange(config.beta2 >= 0 && config.beta2 < 1, "optimizer.beta2: must be in [0, 1)");
    checkRange(config.eps > 0, "optimizer.eps: must be > 0");
    return std::make_unique<AdamW>(config, std::move(params));
  }
  throw std::invalid_argument("optimizer.name: unknown optimizer \"" + config.name +
                              "\" (known: sgd, adamw)");
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

}  // namespace cumulus::trainer
