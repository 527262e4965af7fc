#pragma once
// <cumulus/sampler.h>: the distributed sampler. Each epoch's order is a permutation that depends only on
// (seed, epoch). A global cursor counts samples consumed in the current epoch; global batch k of
// the epoch is positions [k*B, (k+1)*B) of the permutation. Rank r of p takes the contiguous
// slice [r*B/p, (r+1)*B/p) of that global batch (integer division, so shards differ by at most
// one sample). Because the state is only (epoch, cursor), a run can resume at another world size
// and keep the same global batches. No LibTorch here: indices are plain integers.
//
// The permutation is a Fisher–Yates shuffle driven by SplitMix64 keyed on (seed, epoch)
// (data/random.h), so it is the same on every platform and never touches torch's generator;
// shuffle=false gives the identity order. Without drop_last an epoch has ceil(N/B) global batches
// and the last may be short; with drop_last it has floor(N/B) and the short tail is skipped.
// A sampler is a value: not thread-safe to mutate, const methods may run concurrently.

#include <cstdint>
#include <vector>

namespace cumulus {

struct SamplerState {
  int64_t epoch = 0;
  int64_t cursor = 0;  // samples of this epoch already consumed, a multiple of the global batch
  bool operator==(const SamplerState& o) const { return epoch == o.epoch && cursor == o.cursor; }
};

class DistributedSampler {
 public:
  // Throws std::invalid_argument if dataset_size <= 0 or global_batch_size <= 0, or if
  // drop_last leaves no complete batch.
  DistributedSampler(int64_t dataset_size, int64_t global_batch_size, uint64_t seed, bool shuffle,
                     bool drop_last);

  int64_t stepsPerEpoch() const;
  // The whole global batch at the cursor (its size is B, or less for a last partial batch).
  std::vector<int64_t> globalBatch() const;
  // Rank `rank` of `world`'s slice of globalBatch(). Empty when the batch has fewer than `world`
  // samples left for this rank. Throws std::invalid_argument unless 0 <= rank < world.
  std::vector<int64_t> localIndices(int64_t rank, int64_t world) const;
  // Rank `rank`'s slice of globalBatch() under unequal `shares`: one non-negative sample count per
  // rank (shares.size() is the world size), summing to the global batch size B. With S_r the sum
  // of the shares before rank r, rank r takes positions [S_r, S_{r+1}) of a full batch. A short
  // last batch of b < B samples scales the boundaries to floor(b·S_r/B), so the ranks still split
  // it in the same proportions. Equal shares (equalShares(B, p)) give exactly localIndices(rank,
  // p), the short batch included: there the scaled boundaries would not always agree with it (B=4,
  // p=3, b=3 would move rank 0's sample to rank 1). Throws std::invalid_argument for a negative
  // share, a sum other than B, or a rank out of range.
  std::vector<int64_t> shareIndices(int64_t rank, const std::vector<int64_t>& shares) const;
  // The shares that localIndices(r, world) takes of a full batch: (r+1)·B/world − r·B/world.
  static std::vector<int64_t> equalShares(int64_t global_batch_size, int64_t world);
  // Moves the cursor past the current global batch, rolling into the next epoch at the end.
  void advance();

  SamplerState state() const { return state_; }
  // Validates cursor range: throws std::invalid_argument (leaving the state unchanged) unless
  // epoch >= 0, 0 <= cursor < the epoch's consumed size, and cursor is a multiple of B.
  void restore(const SamplerState& state);

 private:
  void buildPermutation();
  int64_t size_;
  int64_t batch_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  SamplerState state_;
  std::vector<int64_t> perm_;  // permutation for state_.epoch
};

}  // namespace cumulus
