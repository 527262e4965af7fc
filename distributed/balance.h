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

// A rank's step computes in (fixed + share) / rate seconds: `rate` samples per second, and a part
// of the step that does not shrink with the share (the optimizer's step, the framework's dispatch
// of each layer), as `fixed` samples' worth. `fixed` empty: 0 for every rank, the time
// proportional to the share.
//
// Integer shares that give every rank the same predicted time, each >= `floor`, summing to
// `global_batch`: share_r = T·rate_r - fixed_r, T such that they sum to the batch (with no fixed
// part, shares proportional to the rates). A rank whose share falls below the floor gets the
// floor and the others split the rest so (repeated until no other rank falls below it); then
// largest-remainder rounding, ties to the lower rank, so every rank computes the same answer from
// the same inputs. Throws std::invalid_argument for no rates, a rate that is not > 0 and finite,
// a fixed part that is not >= 0 and finite or not one per rate, or floor·ranks > global_batch.
std::vector<int64_t> proportionalShares(const std::vector<double>& rates, int64_t global_batch,
                                        int64_t floor, const std::vector<double>& fixed = {});

// The step's compute time the shares predict: max over ranks of (fixed + share) / rate (the
// slowest rank decides when the last gradient is ready). Sizes must match; `fixed` empty: 0.
double predictedSeconds(const std::vector<int64_t>& shares, const std::vector<double>& rates,
                        const std::vector<double>& fixed = {});

struct BalanceDecision {
  std::vector<int64_t> shares;  // to use from the next step: the current ones, or new ones
  bool changed = false;
  double current_seconds = 0;   // predictedSeconds of the current shares
  double proposed_seconds = 0;  // and of the shares taken (the proportional ones, or part way)
  // current / proposed: > 1 when the new shares would be faster.
  double predicted_speedup() const {
    return proposed_seconds > 0 ? current_seconds / proposed_seconds : 1.0;
  }
};

// Hysteresis: the proportional shares replace `current` only when they predict a step faster by
// more than `min_gain` (0.05: 5%), so that noise in the rates does not move the shares at every
// look. A rate that is not > 0 and finite (a rank that has not measured one yet) keeps `current`.
// `current` must hold one share per rate (std::invalid_argument otherwise).
//
// `move` in (0, 1]: the shares taken go that far from `current` towards the proportional ones
// (whole samples, each between the two, summing to the batch). 1 jumps; 0.5, halfway at each
// look, damps the swings that noisy rates (a core shared with another process) cause, at the
// price of a look or two more to settle.
BalanceDecision decideShares(const std::vector<double>& rates, int64_t global_batch, int64_t floor,
                             const std::vector<int64_t>& current, double min_gain,
                             const std::vector<double>& fixed = {}, double move = 1.0);

// An exponential moving average of samples per second of compute. The first `skip` steps after a
// reset are not counted (the first step of a launch or a re-formed group pays for allocations and
// warm caches). rate() is 0 until a step was counted.
//
// It also fits the step's fixed part from the steps at two shares that followed each other: each
// share's steps (the first after a change left out) give an average time, and two shares at least
// a tenth apart give the line seconds = (fixed + share) / speed, fitted when the second one ends
// (at the next change of share) and kept until the change after. Shares proportional to rate()
// alone would starve a rank whose step has a fixed part: at a smaller share its rate looks lower,
// so it gets a smaller share again at the next look.
class RateMeter {
 public:
  explicit RateMeter(double weight = 0.25, int skip = 1) : weight_(weight), skip_(skip) {}
  void add(int64_t samples, double seconds);
  double rate() const { return rate_; }
  // The fixed part, in samples (>= 0; 0 until a second share ended, or when the fit says none).
  double fixed() const { return fixed_; }
  // Samples per second of the model at the current share (the one before while the current has
  // no step counted yet): (fixed + share) over its average time; rate() while fixed() is 0.
  double speed() const;
  void reset();

 private:
  struct Share {
    int64_t samples = 0;
    double seconds = 0;  // the average of its steps, the first after the change left out
    int steps = 0;       // counted
    bool warm = false;   // its first step, which is not counted, was seen
  };
  void fit(const Share& a, const Share& b);

  double weight_;  // of the newest step
  int skip_;
  int seen_ = 0;
  double rate_ = 0;
  Share current_, previous_;
  double fixed_ = 0;
};

}  // namespace cumulus::distributed
