#include "distributed/balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace cumulus::distributed {
namespace {

bool usable(double rate) { return std::isfinite(rate) && rate > 0; }

}  // namespace

int64_t shareFloor(int64_t global_batch, int64_t world, int64_t micro_batches) {
  if (world < 1) return 0;
  const int64_t equal = global_batch / world;
  return std::min(equal, std::max<int64_t>({1, micro_batches, global_batch / (8 * world)}));
}

std::vector<int64_t> proportionalShares(const std::vector<double>& rates, int64_t global_batch,
                                        int64_t floor) {
  const auto p = static_cast<int64_t>(rates.size());
  if (p == 0) throw std::invalid_argument("proportionalShares: no rates");
  for (int64_t r = 0; r < p; ++r) {
    if (!usable(rates[static_cast<size_t>(r)])) {
      throw std::invalid_argument("proportionalShares: rank " + std::to_string(r) + "'s rate " +
                                  std::to_string(rates[static_cast<size_t>(r)]) +
                                  " is not a positive number");
    }
  }
  if (floor < 0 || floor * p > global_batch) {
    throw std::invalid_argument("proportionalShares: a floor of " + std::to_string(floor) +
                                " for " + std::to_string(p) + " ranks exceeds the batch of " +
                                std::to_string(global_batch));
  }
  // Water-filling: the ranks at the floor are fixed, the rest split what is left in proportion.
  // Each pass fixes at least one more rank or ends, so at most p passes.
  std::vector<bool> at_floor(rates.size(), false);
  std::vector<double> ideal(rates.size(), 0.0);
  for (bool moved = true; moved;) {
    moved = false;
    double free_rate = 0;
    int64_t left = global_batch;
    for (int64_t r = 0; r < p; ++r) {
      if (at_floor[r]) {
        left -= floor;
      } else {
        free_rate += rates[r];
      }
    }
    for (int64_t r = 0; r < p; ++r) {
      if (at_floor[r]) {
        ideal[r] = static_cast<double>(floor);
        continue;
      }
      ideal[r] = static_cast<double>(left) * rates[r] / free_rate;
      if (ideal[r] < static_cast<double>(floor)) {
        at_floor[r] = true;
        moved = true;
      }
    }
  }
  // Largest remainder: everyone gets the whole part of its ideal share (>= floor: an unfixed
  // rank's ideal is >= floor), then the samples left go one each to the largest fractions.
  std::vector<int64_t> shares(rates.size());
  int64_t given = 0;
  for (int64_t r = 0; r < p; ++r) {
    shares[r] = std::max(floor, static_cast<int64_t>(std::floor(ideal[r])));
    given += shares[r];
  }
  std::vector<int64_t> order(rates.size());
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

double predictedSeconds(const std::vector<int64_t>& shares, const std::vector<double>& rates) {
  double worst = 0;
  for (size_t r = 0; r < shares.size() && r < rates.size(); ++r) {
    worst = std::max(worst, static_cast<double>(shares[r]) / rates[r]);
  }
  return worst;
}

BalanceDecision decideShares(const std::vector<double>& rates, int64_t global_batch, int64_t floor,
                             const std::vector<int64_t>& current, double min_gain) {
  if (current.size() != rates.size()) {
    throw std::invalid_argument("decideShares: " + std::to_string(current.size()) +
                                " current shares for " + std::to_string(rates.size()) + " rates");
  }
  BalanceDecision decision;
  decision.shares = current;
  if (rates.empty() || !std::all_of(rates.begin(), rates.end(), usable)) return decision;
  const std::vector<int64_t> proposed = proportionalShares(rates, global_batch, floor);
  decision.current_seconds = predictedSeconds(current, rates);
  decision.proposed_seconds = predictedSeconds(proposed, rates);
  if (proposed != current &&
      decision.current_seconds > (1 + min_gain) * decision.proposed_seconds) {
    decision.shares = proposed;
    decision.changed = true;
  }
  return decision;
}

void RateMeter::add(int64_t samples, double seconds) {
  if (seen_++ < skip_ || samples <= 0 || !(seconds > 0)) return;
  const double rate = static_cast<double>(samples) / seconds;
  rate_ = rate_ > 0 ? weight_ * rate + (1 - weight_) * rate_ : rate;
}

void RateMeter::reset() {
  seen_ = 0;
  rate_ = 0;
}

}  // namespace cumulus::distributed
