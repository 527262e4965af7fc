#pragma once
// The seam between the training loop and gradient communication.
//
// Loss normalization makes the sync a plain SUM: each micro-batch's loss is the sum over its
// samples of each sample's mean loss (trainer/loss.h: summed cross-entropy, a language model's
// per-sample mean over its tokens, a per-sample mean squared error, or a module's own mean loss
// times the micro-batch's sample count) divided by B, the sample count of the whole global batch
// (all ranks, all micro-batches). The gradients of one rank's micro-batches therefore add up to
// that rank's share of the global mean, and the sum over ranks is exactly the gradient of the
// mean per-sample loss over the global batch, whatever the loss, the world size, the accumulation
// count, or an uneven last batch. No implementation may divide by the world size.
//
// Call order, per optimizer step with k micro-batches (the trainer zero-fills every .grad()
// before the first micro-batch, so gradient tensors exist and keep their storage):
//   for i in 0..k-1: beforeBackward(i == k-1); loss.backward(); afterBackward(i == k-1);
//   finish();  // now every .grad() holds the sum over all ranks
// `last` is true only for the micro-batch whose backward completes the local gradient: an
// overlapping implementation (buckets reduced from autograd hooks while backward goes on, as in
// DDP's Reducer) starts communication only then; earlier micro-batches just accumulate locally.
// A rank whose share of a micro-batch is empty (a last partial global batch smaller than the
// world) skips loss.backward() but still makes both calls, so no gradient hook fires: finish()
// must then reduce the gradients the hooks did not hand over (zero-filled, or earlier
// micro-batches' sums).
//
// attach() is called once, after the model is built and before the first step; a multi-worker
// implementation broadcasts rank 0's parameters there so every replica starts identical, and
// lays out its buckets. Methods are called from the training thread only.

#include <torch/types.h>

#include <vector>

namespace cumulus::trainer {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual void attach(const std::vector<torch::Tensor>& params) = 0;
  virtual void beforeBackward(bool last) = 0;
  virtual void afterBackward(bool last) = 0;
  // Blocks until every gradient holds the global sum; throws (naming the operation and peer) if
  // the communicator fails or times out.
  virtual void finish() = 0;
};

// World size 1: the local gradient already is the global sum.
class LocalGradientSync final : public GradientSync {
 public:
  void attach(const std::vector<torch::Tensor>&) override {}
  void beforeBackward(bool) override {}
  void afterBackward(bool) override {}
  void finish() override {}
};

}  // namespace cumulus::trainer
