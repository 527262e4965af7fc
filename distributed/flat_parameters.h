#pragma once
// FlatParameters: a model's parameters and their gradients moved into a few flat buffers, so that
// an optimizer step, a gradient norm or a zero-fill is a handful of passes over contiguous memory
// instead of a few small operations per tensor.
//
// The buffers follow a bucket layout (bucket_layout.h). With the layout the
// DistributedGradientSync computes (same order, same caps), each gradient bucket is exactly the
// memory the sync reduces: its attach() finds the gradients already laid out and reduces them in
// place, with no bucket of its own.
//
// The constructor allocates per bucket one flat tensor of values and one of gradients, copies each
// parameter's values (and its gradient, if it has one) into its slice, and re-points the
// parameter at its slice (Tensor::set_data: the parameter keeps its identity, so a torch::nn or
// TorchScript module that holds it computes with the flat storage from then on) and its .grad()
// at its gradient slice. A parameter without a gradient keeps none until zeroGrads().
//
// Those aliases hold as long as nobody replaces a parameter's data or its .grad(). Whoever does
// is not wrong, only slower: gatherGradients() and gatherValues() copy what moved into the flat
// buffers before a step and scatterValues() copies values back, and zeroGrads() re-points the
// gradients. Not thread-safe.

#include <torch/types.h>

#include <cstddef>
#include <vector>

#include "distributed/bucket_layout.h"

namespace cumulus::distributed {

// The layout of `params` by computeBucketLayout (dtype key: the torch scalar type), as the
// DistributedGradientSync computes it for the same list.
std::vector<BucketSpec> layoutOf(const std::vector<torch::Tensor>& params, size_t cap_bytes,
                                 size_t first_cap_bytes);

class FlatParameters {
 public:
  struct Bucket {
    BucketSpec spec;       // which parameters, at which offsets
    torch::Tensor values;  // 1-D, spec.numel elements
    torch::Tensor grads;   // 1-D, same offsets
  };

  // Throws std::invalid_argument when a parameter is undefined, not a dense CPU tensor, appears
  // twice, or when `layout` does not place every parameter exactly once with its dtype.
  FlatParameters(std::vector<torch::Tensor> params, std::vector<BucketSpec> layout);
  // One bucket per dtype (a world of one).
  explicit FlatParameters(std::vector<torch::Tensor> params);

  size_t size() const { return params_.size(); }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Parameter i: its bucket and the element offset of its slice there.
  size_t bucketOf(size_t i) const { return slots_[i].bucket; }
  size_t offsetOf(size_t i) const { return slots_[i].offset; }
  // Parameter i's slice of `flat`, a 1-D tensor laid out like its bucket, shaped like the
  // parameter (a view, not a copy).
  torch::Tensor slice(const torch::Tensor& flat, size_t i) const;

  // Whether every parameter's .grad() is its slice of its bucket's gradients.
  bool gradsInPlace() const;
  // Zero-fills every gradient, one zero_() per bucket; a parameter whose .grad() was dropped or
  // replaced gets its slice back.
  void zeroGrads();
  // Copies each .grad() that is not its slice into the slice. Throws std::logic_error naming the
  // first parameter without a gradient.
  void gatherGradients();
  // Copies the values of each parameter whose data was replaced into its slice; returns those
  // parameters, for scatterValues() after the update.
  std::vector<size_t> gatherValues();
  void scatterValues(const std::vector<size_t>& moved);

 private:
  struct Slot {
    size_t bucket = 0;
    size_t offset = 0;
  };
  void checkParams() const;
  bool gradInPlace(size_t i) const;
  bool valuesInPlace(size_t i) const;

  std::vector<torch::Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
};

}  // namespace cumulus::distributed
