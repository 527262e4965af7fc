// BatchShares (batch_shares.h): the policy's decisions (balance.h) applied to the step loop.
#include "trainer/batch_shares.h"

#include <torch/torch.h>

#include <stdexcept>

#include "cumulus/process_group.h"
#include "cumulus/recorder.h"
#include "cumulus/sampler.h"
#include "trainer/batch_source.h"

namespace cumulus::trainer {
namespace {

// A change must predict a step's compute faster by more than this (balance.h decideShares).
constexpr double kMinGain = 0.05;

std::string sharesText(const std::vector<int64_t>& shares) {
  std::string text;
  for (const int64_t s : shares) text += (text.empty() ? "" : "/") + std::to_string(s);
  return text;
}

}  // namespace

BatchShares::BatchShares(const configs::TrainerConfig& config, std::shared_ptr<BatchSource> batches)
    : config_(config), batches_(std::move(batches)) {}

void BatchShares::start(int64_t world, std::vector<std::string>& notes) {
  using configs::BalanceMode;
  if (!shares_.empty() && config_.balance != BalanceMode::kFixed) {
    notes.push_back(config_.balance == BalanceMode::kAuto
                        ? "batch shares " + sharesText(shares_) + " from the checkpoint"
                        : "the checkpoint's batch shares " + sharesText(shares_) +
                              " are not used (trainer.balance: off): equal shares");
  }
  if (config_.balance == BalanceMode::kOff) {
    shares_.clear();
    return;
  }
  if (config_.balance == BalanceMode::kFixed) {
    if (static_cast<int64_t>(config_.balance_shares.size()) != world) {
      throw std::invalid_argument(
          "trainer.balance_shares: " + std::to_string(config_.balance_shares.size()) +
          " shares for " + std::to_string(world) +
          " workers; give one sample count per worker, or set trainer.balance: auto or off");
    }
    shares_ = config_.balance_shares;
  }
  try {
    batches_->setShares(shares_);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("trainer.balance_shares: ") + e.what());
  } catch (const std::logic_error& e) {
    throw std::invalid_argument(std::string("trainer.balance: ") + e.what());
  }
}

void BatchShares::record(const char* reason, int64_t world, Recorder& recorder) const {
  if (config_.balance == configs::BalanceMode::kOff) return;
  recorder.balance(
      shares_.empty() ? DistributedSampler::equalShares(config_.global_batch_size, world) : shares_,
      {}, 1, reason);
}

void BatchShares::atBoundary(int64_t done, ProcessGroup* group, int64_t micro_batches,
                             Recorder& recorder) {
  if (config_.balance != configs::BalanceMode::kAuto || group == nullptr ||
      done % config_.balance_every_steps != 0) {
    return;
  }
  const int64_t world = group->size();
  const double mine = rate_.rate();
  const torch::Tensor all = group->allgather(torch::tensor({mine}, torch::kFloat64)).contiguous();
  const double* v = all.data_ptr<double>();
  const std::vector<double> rates(v, v + all.numel());
  const int64_t batch = config_.global_batch_size;
  const std::vector<int64_t> current =
      shares_.empty() ? DistributedSampler::equalShares(batch, world) : shares_;
  const distributed::BalanceDecision decision = distributed::decideShares(
      rates, batch, distributed::shareFloor(batch, world, micro_batches), current, kMinGain);
  if (!decision.changed) return;
  batches_->setShares(decision.shares);
  shares_ = decision.shares;
  recorder.balance(shares_, rates, decision.predicted_speedup(), "auto");
}

void BatchShares::reset(int64_t world, std::vector<std::string>& warnings) {
  using configs::BalanceMode;
  rate_.reset();
  if (config_.balance == BalanceMode::kOff) return;  // reshard() went back to equal shares
  shares_.clear();
  if (config_.balance == BalanceMode::kFixed &&
      static_cast<int64_t>(config_.balance_shares.size()) == world) {
    shares_ = config_.balance_shares;
  } else if (config_.balance == BalanceMode::kFixed) {
    warnings.push_back("warning: trainer.balance_shares has " +
                       std::to_string(config_.balance_shares.size()) + " shares for " +
                       std::to_string(world) +
                       " workers after the group re-formed; using equal shares");
  }
  batches_->setShares(shares_);
}

}  // namespace cumulus::trainer
