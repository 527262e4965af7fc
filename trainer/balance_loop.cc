// Straggler-aware batch shares in the step loop (trainer.balance; the policy is balance.h): the
// shares in force, their agreement at step boundaries, and their reset after a re-forming. The
// shares change at a boundary before its checkpoint, so a checkpoint holds the shares of the step
// after it and a resume replays them. The rate meter starts again with every launch, so after a
// resume the next change may come at another step or differ from an uninterrupted run's.
#include <torch/torch.h>

#include "cumulus/process_group.h"
#include "trainer/trainer_impl.h"

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

void Trainer::Impl::startShares() {
  const auto& t = config_.trainer;
  if (!shares_.empty() && t.balance != configs::BalanceMode::kFixed) {
    resume_notes_.push_back(t.balance == configs::BalanceMode::kAuto
                                ? "batch shares " + sharesText(shares_) + " from the checkpoint"
                                : "the checkpoint's batch shares " + sharesText(shares_) +
                                      " are not used (trainer.balance: off): equal shares");
  }
  if (t.balance == configs::BalanceMode::kOff) {
    shares_.clear();
    return;
  }
  if (t.balance == configs::BalanceMode::kFixed) {
    if (static_cast<int64_t>(t.balance_shares.size()) != env_.world_size) {
      throw std::invalid_argument(
          "trainer.balance_shares: " + std::to_string(t.balance_shares.size()) + " shares for " +
          std::to_string(env_.world_size) +
          " workers; give one sample count per worker, or set trainer.balance: auto or off");
    }
    shares_ = t.balance_shares;
  }
  try {
    batches_->setShares(shares_);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("trainer.balance_shares: ") + e.what());
  } catch (const std::logic_error& e) {
    throw std::invalid_argument(std::string("trainer.balance: ") + e.what());
  }
}

void Trainer::Impl::recordShares(const char* reason, int64_t done) {
  if (config_.trainer.balance == configs::BalanceMode::kOff) return;
  BalanceRecord record;
  record.reason = reason;
  record.step = done;
  record.shares = shares_.empty() ? DistributedSampler::equalShares(
                                        config_.trainer.global_batch_size, env_.world_size)
                                  : shares_;
  recorder_->balanced(record);
}

void Trainer::Impl::balanceAt(int64_t done) {
  const auto& t = config_.trainer;
  if (t.balance != configs::BalanceMode::kAuto || group_ == nullptr || done % t.balance_every_steps != 0) return;
  const double mine = compute_rate_.rate();
  const torch::Tensor all = group_->allgather(torch::tensor({mine}, torch::kFloat64)).contiguous();
  const double* v = all.data_ptr<double>();
  const std::vector<double> rates(v, v + all.numel());
  const int64_t batch = t.global_batch_size;
  const std::vector<int64_t> current =
      shares_.empty() ? DistributedSampler::equalShares(batch, env_.world_size) : shares_;
  const BalanceDecision decision = decideShares(
      rates, batch, shareFloor(batch, env_.world_size, grad_accumulation_), current, kMinGain);
  if (!decision.changed) return;
  batches_->setShares(decision.shares);
  shares_ = decision.shares;
  BalanceRecord record;
  record.reason = "auto";
  record.step = done;
  record.shares = shares_;
  record.rates = rates;
  record.predicted_speedup = decision.predicted_speedup();
  recorder_->balanced(record);
}

void Trainer::Impl::resetShares(std::vector<std::string>& warnings) {
  compute_rate_.reset();
  const auto& t = config_.trainer;
  if (t.balance == configs::BalanceMode::kOff) return;  // reshard() went back to equal shares
  shares_.clear();
  if (t.balance == configs::BalanceMode::kFixed && static_cast<int64_t>(t.balance_shares.size()) == env_.world_size) {
    shares_ = t.balance_shares;
  } else if (t.balance == configs::BalanceMode::kFixed) {
    warnings.push_back("warning: trainer.balance_shares has " +
                       std::to_string(t.balance_shares.size()) + " shares for " +
                       std::to_string(env_.world_size) +
                       " workers after the group re-formed; using equal shares");
  }
  batches_->setShares(shares_);
}

}  // namespace cumulus::trainer
