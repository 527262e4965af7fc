#include "cumulus/sampler.h"

#include "data/random.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace cumulus {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t global_batch_size,
                                       uint64_t seed, bool shuffle, bool drop_last)
    : size_(dataset_size),
      batch_(global_batch_size),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last) {
  if (dataset_size <= 0) {
    throw std::invalid_argument("sampler: dataset size must be positive, got " +
                                std::to_string(dataset_size));
  }
  if (global_batch_size <= 0) {
    throw std::invalid_argument("sampler: global batch size must be positive, got " +
                                std::to_string(global_batch_size));
  }
  if (drop_last && global_batch_size > dataset_size) {
    throw std::invalid_argument("sampler: global batch size " + std::to_string(global_batch_size) +
                                " exceeds the dataset size " + std::to_string(dataset_size) +
                                " and drop_last leaves no complete batch; lower the batch size "
                                "or disable drop_last");
  }
  buildPermutation();
}

int64_t DistributedSampler::stepsPerEpoch() const {
  return drop_last_ ? size_ / batch_ : (size_ + batch_ - 1) / batch_;
}

// Positions [0, epochSize) of the permutation are consumed each epoch; with drop_last the tail
// that does not fill a batch is skipped (with shuffle it differs every epoch, so no sample is
// always left out).
static int64_t epochSize(int64_t size, int64_t batch, bool drop_last) {
  return drop_last ? size / batch * batch : size;
}

std::vector<int64_t> DistributedSampler::globalBatch() const {
  const int64_t end = std::min(state_.cursor + batch_, epochSize(size_, batch_, drop_last_));
  return {perm_.begin() + state_.cursor, perm_.begin() + end};
}

std::vector<int64_t> DistributedSampler::localIndices(int64_t rank, int64_t world) const {
  if (world <= 0 || rank < 0 || rank >= world) {
    throw std::invalid_argument("sampler: rank " + std::to_string(rank) +
                                " is out of range for world size " + std::to_string(world));
  }
  const int64_t end = std::min(state_.cursor + batch_, epochSize(size_, batch_, drop_last_));
  const int64_t n = end - state_.cursor;
  // Slicing the actual batch size (not B) keeps a short last batch spread over all ranks.
  const int64_t lo = state_.cursor + rank * n / world;
  const int64_t hi = state_.cursor + (rank + 1) * n / world;
  return {perm_.begin() + lo, perm_.begin() + hi};
}

std::vector<int64_t> DistributedSampler::equalShares(int64_t global_batch_size, int64_t world) {
  std::vector<int64_t> shares(static_cast<size_t>(std::max<int64_t>(0, world)));
  for (int64_t r = 0; r < world; ++r) {
    shares[static_cast<size_t>(r)] =
        (r + 1) * global_batch_size / world - r * global_batch_size / world;
  }
  return shares;
}

std::vector<int64_t> DistributedSampler::shareIndices(int64_t rank,
                                                      const std::vector<int64_t>& shares) const {
  const auto world = static_cast<int64_t>(shares.size());
  if (rank < 0 || rank >= world) {
    throw std::invalid_argument("sampler: rank " + std::to_string(rank) + " is out of range for " +
                                std::to_string(world) + " shares");
  }
  int64_t sum = 0;
  int64_t before = 0;  // S_rank
  for (int64_t r = 0; r < world; ++r) {
    const int64_t s = shares[static_cast<size_t>(r)];
    if (s < 0) {
      throw std::invalid_argument("sampler: rank " + std::to_string(r) + "'s share " +
                                  std::to_string(s) + " is negative");
    }
    if (r == rank) before = sum;
    // Shares come from a config or a checkpoint: a sum past int64 is refused, not wrapped.
    if (__builtin_add_overflow(sum, s, &sum)) {
      throw std::invalid_argument("sampler: rank " + std::to_string(r) + "'s share " +
                                  std::to_string(s) + " takes the shares' sum past 2^63 - 1");
    }
  }
  if (sum != batch_) {
    throw std::invalid_argument("sampler: the shares sum to " + std::to_string(sum) +
                                ", not to the global batch size " + std::to_string(batch_));
  }
  if (shares == equalShares(batch_, world)) return localIndices(rank, world);
  const int64_t end = std::min(state_.cursor + batch_, epochSize(size_, batch_, drop_last_));
  const int64_t n = end - state_.cursor;
  const int64_t mine = shares[static_cast<size_t>(rank)];
  // n == B for every batch but a short last one; n·S ≤ B² stays far from overflow for any batch
  // that fits in memory.
  const int64_t lo = state_.cursor + n * before / batch_;
  const int64_t hi = state_.cursor + n * (before + mine) / batch_;
  return {perm_.begin() + lo, perm_.begin() + hi};
}

void DistributedSampler::advance() {
  state_.cursor += batch_;
  if (state_.cursor >= epochSize(size_, batch_, drop_last_)) {
    state_.cursor = 0;
    ++state_.epoch;
    buildPermutation();
  }
}

void DistributedSampler::restore(const SamplerState& state) {
  const int64_t limit = epochSize(size_, batch_, drop_last_);
  if (state.epoch < 0) {
    throw std::invalid_argument("sampler: cannot restore epoch " + std::to_string(state.epoch) +
                                ": epochs start at 0");
  }
  if (state.cursor < 0 || state.cursor >= limit) {
    throw std::invalid_argument("sampler: cannot restore cursor " + std::to_string(state.cursor) +
                                ": it must lie in [0, " + std::to_string(limit) +
                                ") for a dataset of " + std::to_string(size_) + " samples" +
                                (drop_last_ ? " with drop_last" : ""));
  }
  if (state.cursor % batch_ != 0) {
    throw std::invalid_argument("sampler: cannot restore cursor " + std::to_string(state.cursor) +
                                ": it is not a multiple of the global batch size " +
                                std::to_string(batch_) +
                                " (was the checkpoint written with another global batch size?)");
  }
  const bool new_epoch = state.epoch != state_.epoch;
  state_ = state;
  if (new_epoch) buildPermutation();
}

// Fisher–Yates driven by SplitMix64 keyed on (seed, epoch): the order is a pure function of those
// two numbers, so every rank, every restart and every world size sees the same permutation.
void DistributedSampler::buildPermutation() {
  perm_.resize(static_cast<size_t>(size_));
  std::iota(perm_.begin(), perm_.end(), int64_t{0});
  if (!shuffle_) return;
  data::SplitMix64 rng(data::streamKey(seed_, static_cast<uint64_t>(state_.epoch)));
  for (int64_t i = size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(perm_[i], perm_[j]);
  }
}

}  // namespace cumulus
