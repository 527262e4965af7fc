#pragma once
// <cumulus/batch_shares.h>: each member's share of the global batch in proportion to its measured
// speed, for an Elastic loop (cumulus-train's `trainer.balance: auto`, the same policy). A worker
// on a slower or busier machine takes fewer samples, so the step no longer waits for it.
//
//   cumulus::BatchShares shares(elastic, global_batch);
//   while (elastic.step() < steps) {
//     elastic.train([&] {
//       auto idx = shares.localIndices(sampler);        // this member's slice of the batch
//       ...
//       elastic.sync().backward(loss_sum / global_batch);  // divided by the global batch
//       ...
//     });
//     shares.rebalance();                              // every member, before boundary()
//     ...boundary()...
//   }
//
// What stays exact: the sampler decides each global batch (DistributedSampler::globalBatch), and
// the shares only split it, [S_r, S_r + share_r) for rank r (shareIndices): every sample of every
// batch is trained once, by one member, whatever the shares and the membership. Since the loss is
// divided by the global batch, any split gives the gradient of the same global mean (up to the
// order of summation).
//
// Measuring: after each step the member's compute time is its train() time less its wait in
// sync() (ElasticTimes), over its share; measure() gives a time of the program's own instead.
// Once a member has stepped at two shares it also knows the part of its step that does not shrink
// with the share (the optimizer's step, the dispatch of each layer: a line through the two shares'
// times). Every every_steps steps rebalance() all-gathers the members' speeds and fixed parts (as
// Elastic::atBoundary work: a failure in it re-forms the group and the shares stay as they are)
// and every member computes the same new shares, those that give every member the same predicted
// time; when they predict a step faster by more than min_gain the shares move halfway to them
// (a member's rate on a busy core swings from look to look: shares that jumped with it swung
// between starving one member and the other). After a change of membership the shares are equal
// again and the rates are measured anew. A Recorder given to the constructor gets a "balance"
// record at each change (the dashboard's shares): "start" for the launch's first shares and
// "reform" for a new membership's (both at the first rebalance() that follows), "auto" for a
// look that moved them.
//
// Resuming: the shares in force travel with a checkpoint (CheckpointState::batch_shares: the
// program's capture puts shares() there, its restore gives them to restore()), so a launch that
// resumes on as many members splits its steps as the stopped one did, and its parameters are
// bit-identical to a run that never stopped. Training thread only.

#include <cstdint>
#include <memory>
#include <vector>

namespace cumulus {

class DistributedSampler;
class Elastic;
class Recorder;

struct BatchSharesOptions {
  int64_t every_steps = 20;  // steps between looks at the rates
  double min_gain = 0.05;    // a change must predict a step faster by more than this share
  // Micro-batches a member splits its share into: no share falls below one sample each.
  int64_t micro_batches = 1;
};

class BatchShares {
 public:
  // Over `elastic` (which must outlive it), for a global batch of `global_batch` samples.
  // std::invalid_argument for a batch < 1, every_steps < 1, a negative min_gain or
  // micro_batches < 1.
  BatchShares(Elastic& elastic, int64_t global_batch, BatchSharesOptions options = {},
              Recorder* recorder = nullptr);
  ~BatchShares();
  BatchShares(const BatchShares&) = delete;
  BatchShares& operator=(const BatchShares&) = delete;

  // The shares of the next step, one per member of the current membership, summing to the
  // global batch (equal until a rebalance changed them, and after every change of membership).
  const std::vector<int64_t>& shares();
  // This member's.
  int64_t share();
  // This member's indices of the sampler's current global batch: sampler.shareIndices(rank,
  // shares()). std::invalid_argument when the sampler's global batch is not this one's.
  std::vector<int64_t> localIndices(const DistributedSampler& sampler);
  // This step's compute: `samples` in `seconds` (instead of what Elastic measured).
  void measure(int64_t samples, double seconds);
  // After each train(), on every member: every every_steps steps the shares are agreed anew.
  // True when they changed (from the next step on).
  bool rebalance();
  // This member's measured rate, samples per second of compute; 0 before one was measured.
  double rate() const;
  // The shares a checkpoint saved (CheckpointState::batch_shares), from the program's restore.
  // They are the launch's first shares when its first membership (epoch 0) has as many members
  // and they sum to this global batch with none below the floor of micro_batches samples each;
  // any other launch (another size, another batch, none saved) starts equal, and so does a
  // replacement that a peer's state healed (the membership that admitted it is a new one, whose
  // shares are equal). So a restore that also runs at a heal may call it every time. Only before
  // the launch's first shares(), share() or localIndices(): later calls are ignored.
  void restore(const std::vector<int64_t>& saved);
  // Whether the shares in force are restore()'s (until the first change of shares).
  bool restored();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus
