#include "distributed/balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

namespace cumulus::distributed {
namespace {

bool usable(double rate) { return std::isfinite(rate) && rate > 0; }

// Steps a share's average needs before it takes part in the fit of the fixed part.
constexpr int kStepsToFit = 3;

}  // namespace

int64_t shareFloor(int64_t global_batch, int64_t world, int64_t micro_batches) {
  if (world < 1) return 0;
  const int64_t equal = global_batch / world;
  return std::min(equal, std::max<int64_t>({1, micro_batches, global_batch / (8 * world)}));
}

namespace {

// proportionalShares' std::invalid_argument for inputs it cannot share by.
void checkShareInputs(const std::vector<double>& rates, int64_t global_batch, int64_t floor,
                      const std::vector<double>& fixed) {
  const auto p = static_cast<int64_t>(rates.size());
  if (p == 0) throw std::invalid_argument("proportionalShares: no rates");
  if (!fixed.empty() && fixed.size() != rates.size()) {
    throw std::invalid_argument("proportionalShares: " + std::to_string(fixed.size()) +
                                " fixed parts for " + std::to_string(p) + " rates");
  }
  for (size_t r = 0; r < fixed.size(); ++r) {
    if (!std::isfinite(fixed[r]) || fixed[r] < 0) {
      throw std::invalid_argument("proportionalShares: rank " + std::to_string(r) +
                                  "'s fixed part " + std::to_string(fixed[r]) +
                                  " is not a number >= 0");
    }
  }
  for (size_t r = 0; r < rates.size(); ++r) {
    if (!usable(rates[r])) {
      throw std::invalid_argument("proportionalShares: rank " + std::to_string(r) + "'s rate " +
                                  std::to_string(rates[r]) + " is not a positive number");
    }
  }
  if (floor < 0 || floor * p > global_batch) {
    throw std::invalid_argument("proportionalShares: a floor of " + std::to_string(floor) +
                                " for " + std::to_string(p) + " ranks exceeds the batch of " +
                                std::to_string(global_batch));
  }
}

// The shares in real numbers. Water-filling: the ranks at the floor are fixed, the rest split
// what is left so that they finish together. Each pass fixes at least one more rank or ends, so
// at most one pass per rank.
std::vector<double> idealShares(const std::vector<double>& rates, int64_t global_batch,
                                int64_t floor, const std::vector<double>& fixed) {
  const auto fixedOf = [&](size_t r) { return fixed.empty() ? 0.0 : fixed[r]; };
  std::vector<bool> at_floor(rates.size(), false);
  std::vector<double> ideal(rates.size(), 0.0);
  for (bool moved = true; moved;) {
    moved = false;
    double free_rate = 0;
    double left = static_cast<double>(global_batch);  // with the free ranks' fixed parts
    for (size_t r = 0; r < rates.size(); ++r) {
      if (at_floor[r]) {
        left -= static_cast<double>(floor);
      } else {
        free_rate += rates[r];
        left += fixedOf(r);
      }
    }
    for (size_t r = 0; r < rates.size(); ++r) {
      if (at_floor[r]) {
        ideal[r] = static_cast<double>(floor);
        continue;
      }
      ideal[r] = left * rates[r] / free_rate - fixedOf(r);
      if (ideal[r] < static_cast<double>(floor)) {
        at_floor[r] = true;
        moved = true;
      }
    }
  }
  return ideal;
}

// Largest remainder: everyone gets the whole part of its ideal share (>= floor: an unfixed rank's
// ideal is >= floor), then the samples left go one each to the largest fractions, ties to the
// lower rank.
std::vector<int64_t> roundShares(const std::vector<double>& ideal, int64_t global_batch,
                                 int64_t floor) {
  std::vector<int64_t> shares(ideal.size());
  int64_t given = 0;
  for (size_t r = 0; r < ideal.size(); ++r) {
    shares[r] = std::max(floor, static_cast<int64_t>(std::floor(ideal[r])));
    given += shares[r];
  }
  std::vector<int64_t> order(ideal.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ideal[a] - std::floor(ideal[a]) > ideal[b] - std::floor(ideal[b]);
  });
  // Rounding can leave the sum a few samples off either way (floating point); settle it on the
  // ranks in remainder order, never below the floor.
  for (size_t i = 0; given < global_batch; i = (i + 1) % order.size()) {
    ++shares[order[i]];
    ++given;
  }
  for (size_t i = order.size(); given > global_batch;) {
    i = i == 0 ? order.size() - 1 : i - 1;
    if (shares[order[i]] > floor) {
      --shares[order[i]];
      --given;
    }
  }
  return shares;
}

}  // namespace

std::vector<int64_t> proportionalShares(const std::vector<double>& rates, int64_t global_batch,
                                        int64_t floor, const std::vector<double>& fixed) {
  checkShareInputs(rates, global_batch, floor, fixed);
  return roundShares(idealShares(rates, global_batch, floor, fixed), global_batch, floor);
}

double predictedSeconds(const std::vector<int64_t>& shares, const std::vector<double>& rates,
                        const std::vector<double>& fixed) {
  double worst = 0;
  for (size_t r = 0; r < shares.size() && r < rates.size(); ++r) {
    const double f = r < fixed.size() ? fixed[r] : 0.0;
    worst = std::max(worst, (f + static_cast<double>(shares[r])) / rates[r]);
  }
  return worst;
}

namespace {

// `current` moved the fraction `move` of the way to `target` (same sum): each share truncated
// towards `current`, then the samples that truncation left over given back one at a time, in rank
// order, to shares that have not reached their target.
std::vector<int64_t> partWay(const std::vector<int64_t>& current,
                             const std::vector<int64_t>& target, double move) {
  std::vector<int64_t> out(current.size());
  int64_t left = 0;  // target's sum less out's
  for (size_t r = 0; r < current.size(); ++r) {
    out[r] = current[r] + static_cast<int64_t>(move * static_cast<double>(target[r] - current[r]));
    left += target[r] - out[r];
  }
  for (size_t r = 0; left != 0; r = (r + 1) % out.size()) {
    if (left > 0 && out[r] < target[r]) {
      ++out[r];
      --left;
    } else if (left < 0 && out[r] > target[r]) {
      --out[r];
      ++left;
    }
  }
  return out;
}

}  // namespace

BalanceDecision decideShares(const std::vector<double>& rates, int64_t global_batch, int64_t floor,
                             const std::vector<int64_t>& current, double min_gain,
                             const std::vector<double>& fixed, double move) {
  if (!(move > 0 && move <= 1)) {
    throw std::invalid_argument("decideShares: move " + std::to_string(move) +
                                " must be in (0, 1]");
  }
  if (current.size() != rates.size()) {
    throw std::invalid_argument("decideShares: " + std::to_string(current.size()) +
                                " current shares for " + std::to_string(rates.size()) + " rates");
  }
  BalanceDecision decision;
  decision.shares = current;
  if (rates.empty() || !std::all_of(rates.begin(), rates.end(), usable)) return decision;
  const std::vector<int64_t> proposed = proportionalShares(rates, global_batch, floor, fixed);
  decision.current_seconds = predictedSeconds(current, rates, fixed);
  decision.proposed_seconds = predictedSeconds(proposed, rates, fixed);
  if (proposed != current &&
      decision.current_seconds > (1 + min_gain) * decision.proposed_seconds) {
    decision.shares = move < 1 ? partWay(current, proposed, move) : proposed;
    decision.proposed_seconds = predictedSeconds(decision.shares, rates, fixed);
    decision.changed = decision.shares != current;
  }
  return decision;
}

void RateMeter::add(int64_t samples, double seconds) {
  if (seen_++ < skip_ || samples <= 0 || !(seconds > 0)) return;
  const double rate = static_cast<double>(samples) / seconds;
  rate_ = rate_ > 0 ? weight_ * rate + (1 - weight_) * rate_ : rate;
  if (samples != current_.samples) {
    // The line goes through two shares that followed each other, so that a machine that got
    // slower in between does not bend it; it is kept until the next change of share.
    if (current_.steps >= kStepsToFit) {
      if (previous_.steps >= kStepsToFit) fit(previous_, current_);
      previous_ = current_;
    }
    current_ = Share{samples};
  }
  if (!std::exchange(current_.warm, true))
    return;  // the first step at a new share pays for new sizes
  current_.seconds =
      current_.steps == 0 ? seconds : weight_ * seconds + (1 - weight_) * current_.seconds;
  ++current_.steps;
}

void RateMeter::fit(const Share& a, const Share& b) {
  const double s1 = static_cast<double>(a.samples), s2 = static_cast<double>(b.samples);
  if (std::abs(s2 - s1) < 0.1 * std::max(s1, s2)) return;  // too close for a slope
  const double per_sample = (b.seconds - a.seconds) / (s2 - s1);
  if (!(per_sample > 0)) {  // noise, or a step that gets no faster with fewer samples
    fixed_ = 0;
    return;
  }
  // Bounded: a fit that says most of a step is fixed rests on a small difference of two noisy
  // times.
  fixed_ = std::clamp(b.seconds / per_sample - s2, 0.0, 2 * std::max(s1, s2));
}

double RateMeter::speed() const {
  const Share& now = current_.steps > 0 ? current_ : previous_;
  if (fixed_ <= 0 || now.steps == 0) return rate_;
  return (fixed_ + static_cast<double>(now.samples)) / now.seconds;
}

void RateMeter::reset() {
  seen_ = 0;
  rate_ = 0;
  current_ = previous_ = Share{};
  fixed_ = 0;
}

}  // namespace cumulus::distributed
