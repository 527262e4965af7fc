#pragma once
// Straggler-aware batch shares (cumulus-train's `trainer.balance: auto`, <cumulus/batch_shares.h>
// for a loop of one's own): the pure policy. Every rank measures its
// compute rate (samples per second of forward and backward, RateMeter); every
// trainer.balance_every_steps steps the ranks all-gather those rates and each computes, with
// decideShares, the same new shares of the global batch from the same gathered vector. The loss
// of every micro-batch is divided by the global batch (data_parallel.h), so any split of the
// global batch gives the gradient of the same global mean: the shares change who computes what,
// never the math (up to the order of summation). No LibTorch, no I/O; values, thread-compatible.

#include <cstdint>
#include <vector>

namespace cumulus::distributed {

// The fewest samples any rank takes: at least one per micro-batch (a rank with an empty
// micro-batch still pays the step's fixed costs for nothing), and at least an eighth of the equal
// share, so that a rank that was slow for a while keeps enough work for its rate to be measured
// well and wins its share back soon after it recovers. Never more than global_batch / world.
int64_t shareFloor(int64_t global_batch, int64_t world, int64_t micro_batches);

// Integer shares proportional to `rates` (one per rank, > 0 and finite), each >= `floor`, summing
// to `global_batch`: a rank whose proportional share falls below the floor gets the floor, and the
// others split the rest in proportion (repeated until no other rank falls below it); then
// largest-remainder rounding, ties to the lower rank, so every rank computes the same answer from
// the same inputs. Throws std::invalid_argument for no rates, a rate that is not > 0 and finite,
// or floor·ranks > global_batch.
std::vector<int64_t> proportionalShares(const std::vector<double>& rates, int64_t global_batch,
                                        int64_t floor);

// The step's compute time the shares predict: max over ranks of share / rate (the slowest rank
// decides when the last gradient is ready). Sizes must match.
double predictedSeconds(const std::vector<int64_t>& shares, const std::vector<double>& rates);

struct BalanceDecision {
  std::vector<int64_t> shares;  // to use from the next step: the current ones, or new ones
  bool changed = false;
  double current_seconds = 0;   // predictedSeconds of the current shares
  double proposed_seconds = 0;  // and of the proportional ones
  // current / proposed: > 1 when the proportional shares would be faster.
  double predicted_speedup() const {
    return proposed_seconds > 0 ? current_seconds / proposed_seconds : 1.0;
  }
};

// Hysteresis: the proportional shares replace `current` only when they predict a step faster by
// more than `min_gain` (0.05: 5%), so that noise in the rates does not move the shares at every
// look. A rate that is not > 0 and finite (a rank that has not measured one yet) keeps `current`.
// `current` must hold one share per rate (std::invalid_argument otherwise).
BalanceDecision decideShares(const std::vector<double>& rates, int64_t global_batch, int64_t floor,
                             const std::vector<int64_t>& current, double min_gain);

// An exponential moving average of samples per second of compute. The first `skip` steps after a
// reset are not counted (the first step of a launch or a re-formed group pays for allocations and
// warm caches). rate() is 0 until a step was counted.
class RateMeter {
 public:
  explicit RateMeter(double weight = 0.25, int skip = 1) : weight_(weight), skip_(skip) {}
  void add(int64_t samples, double seconds);
  double rate() const { return rate_; }
  void reset();

 private:
  double weight_;  // of the newest step
  int skip_;
  int seen_ = 0;
  double rate_ = 0;
};

}  // namespace cumulus::distributed
