#include "distributed/flat_parameters.h"

#include <torch/torch.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace cumulus::distributed {

std::vector<BucketSpec> layoutOf(const std::vector<torch::Tensor>& params, size_t cap_bytes,
                                 size_t first_cap_bytes) {
  std::vector<ParamInfo> infos;
  infos.reserve(params.size());
  for (const auto& p : params) {
    infos.push_back({static_cast<size_t>(p.numel()), static_cast<size_t>(p.element_size()),
                     static_cast<int>(p.scalar_type())});
  }
  return computeBucketLayout(infos, cap_bytes, first_cap_bytes);
}

FlatParameters::FlatParameters(std::vector<torch::Tensor> params)
    : FlatParameters(params, layoutOf(params, std::numeric_limits<size_t>::max() / 2,
                                      std::numeric_limits<size_t>::max() / 2)) {}

FlatParameters::FlatParameters(std::vector<torch::Tensor> params, std::vector<BucketSpec> layout)
    : params_(std::move(params)) {
  checkParams();
  constexpr size_t kUnplaced = std::numeric_limits<size_t>::max();
  slots_.assign(params_.size(), Slot{kUnplaced, 0});
  for (size_t b = 0; b < layout.size(); ++b) {
    const BucketSpec& spec = layout[b];
    for (size_t s = 0; s < spec.params.size(); ++s) {
      const size_t i = spec.params[s];
      if (i >= params_.size() || slots_[i].bucket != kUnplaced ||
          static_cast<int>(params_[i].scalar_type()) != spec.dtype ||
          spec.offsets[s] + static_cast<size_t>(params_[i].numel()) > spec.numel) {
        throw std::invalid_argument("flat parameter layout: bucket " + std::to_string(b) +
                                    " misplaces parameter " + std::to_string(i));
      }
      slots_[i] = {b, spec.offsets[s]};
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (slots_[i].bucket == kUnplaced) {
      throw std::invalid_argument("flat parameter layout: parameter " + std::to_string(i) +
                                  " is in no bucket");
    }
  }

  torch::NoGradGuard no_grad;
  for (BucketSpec& spec : layout) {
    const torch::TensorOptions options = params_[spec.params.front()].options();
    const auto numel = static_cast<int64_t>(spec.numel);
    // Zeros: a gap the layout leaves (none today) must not hold garbage that a norm would read.
    buckets_.push_back(
        {std::move(spec), torch::zeros({numel}, options), torch::zeros({numel}, options)});
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const Bucket& bucket = buckets_[slots_[i].bucket];
    torch::Tensor values = slice(bucket.values, i);
    values.copy_(p);
    p.set_data(values);
    if (p.grad().defined()) {
      torch::Tensor grad = slice(bucket.grads, i);
      grad.copy_(p.grad());
      p.mutable_grad() = grad;
    }
  }
}

void FlatParameters::checkParams() const {
  std::unordered_set<const void*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    const std::string which = "parameter " + std::to_string(i);
    if (!p.defined()) throw std::invalid_argument(which + " is undefined");
    if (!p.device().is_cpu() || p.layout() != torch::kStrided) {
      throw std::invalid_argument(which + " is not a dense CPU tensor; only those can be flat");
    }
    if (!seen.insert(p.unsafeGetTensorImpl()).second) {
      throw std::invalid_argument(which +
                                  " appears twice in the parameter list (a tied weight?); "
                                  "list each parameter once");
    }
  }
}

torch::Tensor FlatParameters::slice(const torch::Tensor& flat, size_t i) const {
  const torch::Tensor& p = params_[i];
  return flat.narrow(0, static_cast<int64_t>(slots_[i].offset), p.numel()).view(p.sizes());
}

bool FlatParameters::gradInPlace(size_t i) const {
  const torch::Tensor& g = params_[i].grad();
  const Bucket& bucket = buckets_[slots_[i].bucket];
  return g.defined() && g.is_contiguous() && g.scalar_type() == bucket.grads.scalar_type() &&
         g.data_ptr() == static_cast<char*>(bucket.grads.data_ptr()) +
                             slots_[i].offset * bucket.grads.element_size();
}

bool FlatParameters::valuesInPlace(size_t i) const {
  const torch::Tensor& p = params_[i];
  const Bucket& bucket = buckets_[slots_[i].bucket];
  return p.is_contiguous() && p.scalar_type() == bucket.values.scalar_type() &&
         p.data_ptr() == static_cast<char*>(bucket.values.data_ptr()) +
                             slots_[i].offset * bucket.values.element_size();
}

bool FlatParameters::gradsInPlace() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!gradInPlace(i)) return false;
  }
  return true;
}

void FlatParameters::zeroGrads() {
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) bucket.grads.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!gradInPlace(i)) params_[i].mutable_grad() = slice(buckets_[slots_[i].bucket].grads, i);
  }
}

void FlatParameters::gatherGradients() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (gradInPlace(i)) continue;
    const torch::Tensor& g = params_[i].grad();
    if (!g.defined()) {
      throw std::logic_error("optimizer step: parameter " + std::to_string(i) + " has no gradient");
    }
    slice(buckets_[slots_[i].bucket].grads, i).copy_(g);
  }
}

std::vector<size_t> FlatParameters::gatherValues() {
  std::vector<size_t> moved;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (valuesInPlace(i)) continue;
    torch::NoGradGuard no_grad;
    slice(buckets_[slots_[i].bucket].values, i).copy_(params_[i]);
    moved.push_back(i);
  }
  return moved;
}

void FlatParameters::scatterValues(const std::vector<size_t>& moved) {
  torch::NoGradGuard no_grad;
  for (const size_t i : moved) params_[i].copy_(slice(buckets_[slots_[i].bucket].values, i));
}

}  // namespace cumulus::distributed
