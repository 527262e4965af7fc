#pragma once
// BatchSource: the step loop's part that yields, for each optimizer step, this rank's share of the
// global batch as tensors, already split into the step's micro-batches. Includes LibTorch (the
// batches are tensors).
//
// Contract with the step loop (trainer.h): next(step, k) once per step, steps in order from the
// first one this launch runs; it returns the batch for that step and moves past it. position()
// is where the next batch starts (saved in a checkpoint after each step) and restore() moves there
// (a resume, before the first next()). Every rank's source must agree on stepsPerEpoch() and
// global_samples, and the ranks' shares of one step together must be that global batch: the loss
// of each micro-batch is divided by global_samples (data_parallel.h). Training thread only.

#include <cstdint>
#include <memory>
#include <vector>

#include "data/examples.h"
#include "cumulus/sampler.h"

namespace cumulus::trainer {

struct StepBatch {
  int64_t epoch = 0;           // 0-based epoch the step belongs to
  int64_t global_samples = 0;  // samples in the global batch, all ranks together
  // This rank's samples (rows of the training set, in micro-batch order), where the source has
  // such numbers; empty otherwise or when this rank has no share.
  std::vector<int64_t> indices;
  // This rank's share in contiguous parts; a part with no rows has undefined tensors.
  std::vector<data::Batch> micro_batches;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t stepsPerEpoch() const = 0;
  virtual SamplerState position() const = 0;
  // Throws std::invalid_argument (leaving the position) for a position the source cannot take.
  virtual void restore(const SamplerState& position) = 0;
  // This rank's share from now on, after the group changed in place (then restore() follows).
  // The default throws std::logic_error: a source that cannot re-shard cannot recover in place.
  virtual void reshard(int64_t rank, int64_t world_size);
  // The ranks' shares of each global batch from the next step on (trainer.balance; balance.h): one
  // sample count per rank, summing to the global batch; empty means equal shares. Every rank sets
  // the same shares at the same step boundary; reshard() returns to equal shares. Throws
  // std::invalid_argument (keeping the shares) for shares that do not fit the world or the batch.
  // The default throws std::logic_error: a source that cannot take shares cannot be balanced.
  virtual void setShares(const std::vector<int64_t>& shares);
  // Step `step`'s batch (0-based, counted from the start of training), split into `micro_batches`
  // (>= 1) parts.
  virtual StepBatch next(int64_t step, int64_t micro_batches) = 0;
};

// The default: DistributedSampler over the training Examples. Rank r of w takes the
// sampler's localIndices(r, w) of each global batch (shareIndices(r, shares) once setShares gave
// unequal shares), and micro-batch i of k holds samples
// [i·n/k, (i+1)·n/k) of those n.
class SamplerBatchSource final : public BatchSource {
 public:
  SamplerBatchSource(std::shared_ptr<const data::Examples> train, DistributedSampler sampler,
                     int64_t rank, int64_t world_size);

  int64_t stepsPerEpoch() const override { return sampler_.stepsPerEpoch(); }
  SamplerState position() const override { return sampler_.state(); }
  void restore(const SamplerState& position) override { sampler_.restore(position); }
  void reshard(int64_t rank, int64_t world_size) override;
  void setShares(const std::vector<int64_t>& shares) override;
  StepBatch next(int64_t step, int64_t micro_batches) override;

 private:
  std::shared_ptr<const data::Examples> train_;
  DistributedSampler sampler_;
  int64_t rank_;
  int64_t world_size_;
  std::vector<int64_t> shares_;  // empty: equal
};

}  // namespace cumulus::trainer
