// BatchShares (<cumulus/batch_shares.h>): the batch-share policy (distributed/balance.h) over an
// Elastic loop's membership and the compute times Elastic measures.

#include "cumulus/batch_shares.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "cumulus/elastic.h"
#include "cumulus/recorder.h"
#include "cumulus/sampler.h"
#include "distributed/balance.h"

namespace cumulus {
namespace {

// Each look moves the shares halfway to the ones the rates propose (distributed::decideShares):
// the rates of a member on a core it shares swing from look to look, and shares that jumped
// with them swung between starving one member and the other.
constexpr double kMove = 0.5;

}  // namespace

struct BatchShares::Impl {
  Elastic& elastic;
  int64_t batch;
  BatchSharesOptions options;
  Recorder* recorder;
  std::vector<int64_t> shares;
  int64_t epoch = -1;  // the membership `shares` are for
  distributed::RateMeter meter;
  ElasticTimes seen;           // Elastic's times when this member last measured
  int64_t measured_at = -1;    // the last step whose compute the meter took
  std::vector<int64_t> saved;  // restore()'s, until the launch's first shares are taken
  bool restored = false;       // the shares in force are restore()'s
  // The balance record's reason for shares a new membership took ("start", "reform"), until
  // rebalance() writes it: the recorder's records begin with the first step.
  const char* unrecorded = nullptr;

  Impl(Elastic& e, int64_t b, BatchSharesOptions o, Recorder* r)
      : elastic(e), batch(b), options(o), recorder(r) {}

  // Equal shares and a fresh meter for a membership the shares are not for yet.
  void follow() {
    if (epoch == elastic.epoch() && static_cast<int>(shares.size()) == elastic.size()) return;
    const bool first = epoch < 0;
    restored = first && elastic.epoch() == 0 && fits(saved);
    shares = restored ? saved : DistributedSampler::equalShares(batch, elastic.size());
    saved.clear();
    unrecorded = first ? "start" : "reform";
    meter.reset();
    epoch = elastic.epoch();
    seen = elastic.times();
    measured_at = elastic.step();
  }

  int64_t mine() { return shares.at(static_cast<size_t>(elastic.rank())); }

  // Saved shares this membership and batch can take.
  bool fits(const std::vector<int64_t>& s) const {
    if (static_cast<int>(s.size()) != elastic.size()) return false;
    const int64_t floor = distributed::shareFloor(batch, elastic.size(), options.micro_batches);
    int64_t sum = 0;
    for (const int64_t share : s) {
      if (share < floor) return false;
      sum += share;
    }
    return sum == batch;
  }
};

BatchShares::BatchShares(Elastic& elastic, int64_t global_batch, BatchSharesOptions options,
                         Recorder* recorder) {
  if (global_batch < 1 || options.every_steps < 1 || !(options.min_gain >= 0) ||
      options.micro_batches < 1) {
    throw std::invalid_argument(
        "BatchShares: the global batch, every_steps and micro_batches must be >= 1 and min_gain "
        ">= 0 (got " +
        std::to_string(global_batch) + ", " + std::to_string(options.every_steps) + ", " +
        std::to_string(options.micro_batches) + ", " + std::to_string(options.min_gain) + ")");
  }
  impl_ = std::make_unique<Impl>(elastic, global_batch, options, recorder);
}

BatchShares::~BatchShares() = default;

const std::vector<int64_t>& BatchShares::shares() {
  impl_->follow();
  return impl_->shares;
}

int64_t BatchShares::share() {
  impl_->follow();
  return impl_->mine();
}

std::vector<int64_t> BatchShares::localIndices(const DistributedSampler& sampler) {
  Impl& m = *impl_;
  m.follow();
  return sampler.shareIndices(m.elastic.rank(), m.shares);
}

void BatchShares::measure(int64_t samples, double seconds) {
  Impl& m = *impl_;
  m.follow();
  m.meter.add(samples, seconds);
  m.measured_at = m.elastic.step();
  m.seen = m.elastic.times();
}

bool BatchShares::rebalance() {
  Impl& m = *impl_;
  m.follow();
  const int64_t step = m.elastic.step();
  if (m.measured_at < step) {  // the compute Elastic timed since the last look, over this share
    const ElasticTimes& t = m.elastic.times();
    const double compute = (t.train - m.seen.train) - (t.comm_wait - m.seen.comm_wait);
    if (step == m.measured_at + 1 && compute > 0) m.meter.add(m.mine(), compute);
    m.seen = t;
    m.measured_at = step;
  }
  if (m.recorder != nullptr && m.unrecorded != nullptr) {
    m.recorder->balance(m.shares, {}, 1, m.unrecorded);
  }
  m.unrecorded = nullptr;
  if (m.elastic.size() < 2 || step % m.options.every_steps != 0) return false;
  // Each rank's speed and its step's fixed part (RateMeter): shares that give every rank the same
  // predicted time.
  std::vector<double> rates, fixed;
  const bool agreed = m.elastic.atBoundary([&] {
    const torch::Tensor all =
        m.elastic.group()
            .allgather(torch::tensor({m.meter.speed(), m.meter.fixed()}, torch::kFloat64))
            .contiguous();
    const double* v = all.data_ptr<double>();
    rates.clear();
    fixed.clear();
    for (int64_t r = 0; r + 1 < all.numel(); r += 2) {
      rates.push_back(v[r]);
      fixed.push_back(v[r + 1]);
    }
  });
  if (!agreed) return false;  // a failure re-formed the group: equal shares come with it
  const distributed::BalanceDecision decision = distributed::decideShares(
      rates, m.batch, distributed::shareFloor(m.batch, m.elastic.size(), m.options.micro_batches),
      m.shares, m.options.min_gain, fixed, kMove);
  if (!decision.changed) return false;
  m.shares = decision.shares;
  m.restored = false;
  if (m.recorder != nullptr) m.recorder->balance(m.shares, rates, decision.predicted_speedup());
  return true;
}

double BatchShares::rate() const { return impl_->meter.rate(); }

void BatchShares::restore(const std::vector<int64_t>& saved) {
  if (impl_->epoch < 0) impl_->saved = saved;  // the launch's first shares are not taken yet
}

bool BatchShares::restored() {
  impl_->follow();
  return impl_->restored;
}

}  // namespace cumulus
