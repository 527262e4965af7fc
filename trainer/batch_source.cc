#include "trainer/batch_source.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace cumulus::trainer {

SamplerBatchSource::SamplerBatchSource(std::shared_ptr<const data::Examples> train,
                                       DistributedSampler sampler, int64_t rank, int64_t world_size)
    : train_(std::move(train)),
      sampler_(std::move(sampler)),
      rank_(rank),
      world_size_(world_size) {}

void BatchSource::reshard(int64_t /*rank*/, int64_t /*world_size*/) {
  throw std::logic_error(
      "this BatchSource cannot re-shard, so the group cannot change in place; override "
      "BatchSource::reshard or use launch.recovery: restart");
}

void BatchSource::setShares(const std::vector<int64_t>& /*shares*/) {
  throw std::logic_error(
      "this BatchSource cannot take unequal shares of the global batch; override "
      "BatchSource::setShares or set trainer.balance: off");
}

void SamplerBatchSource::setShares(const std::vector<int64_t>& shares) {
  if (!shares.empty()) {
    if (static_cast<int64_t>(shares.size()) != world_size_) {
      throw std::invalid_argument(
          "SamplerBatchSource::setShares: " + std::to_string(shares.size()) +
          " shares for a world of " + std::to_string(world_size_));
    }
    sampler_.shareIndices(rank_, shares);  // checks them: throws std::invalid_argument
  }
  shares_ = shares;
}

void SamplerBatchSource::reshard(int64_t rank, int64_t world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("SamplerBatchSource::reshard: rank " + std::to_string(rank) +
                                " of " + std::to_string(world_size));
  }
  rank_ = rank;
  world_size_ = world_size;
  shares_.clear();
}

StepBatch SamplerBatchSource::next(int64_t /*step*/, int64_t micro_batches) {
  StepBatch batch;
  batch.epoch = sampler_.state().epoch;
  batch.global_samples = static_cast<int64_t>(sampler_.globalBatch().size());
  batch.indices = shares_.empty() ? sampler_.localIndices(rank_, world_size_)
                                  : sampler_.shareIndices(rank_, shares_);
  const int64_t k = micro_batches;
  const auto n = static_cast<int64_t>(batch.indices.size());
  for (int64_t i = 0; i < k; ++i) {
    const int64_t begin = i * n / k;
    const int64_t end = (i + 1) * n / k;
    if (end == begin) {
      batch.micro_batches.emplace_back();
      continue;
    }
    const std::vector<int64_t> rows(batch.indices.begin() + begin, batch.indices.begin() + end);
    batch.micro_batches.push_back(train_->gather(rows));
  }
  sampler_.advance();
  return batch;
}

}  // namespace cumulus::trainer
