#include "distributed/balance.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace cumulus::distributed {
namespace {

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

TEST(ShareFloor, OneEighthOfTheEqualShareAtLeastOnePerMicroBatch) {
  EXPECT_EQ(shareFloor(128, 2, 1), 8);    // 128 / 16
  EXPECT_EQ(shareFloor(128, 2, 10), 10);  // a sample per micro-batch
  EXPECT_EQ(shareFloor(10, 4, 1), 1);
  EXPECT_EQ(shareFloor(8, 4, 3), 2);  // never above the equal share
}

TEST(ProportionalShares, HandCheckedCases) {
  // 2:1 of 96: exact.
  EXPECT_EQ(proportionalShares({2.0, 1.0}, 96, 1), (std::vector<int64_t>{64, 32}));
  // 1:1:1 of 10: 3.33 each, the one left over goes to the lowest rank (ties by rank).
  EXPECT_EQ(proportionalShares({1.0, 1.0, 1.0}, 10, 1), (std::vector<int64_t>{4, 3, 3}));
  // 3:1 of 10: 7.5 and 2.5; the tie goes to rank 0.
  EXPECT_EQ(proportionalShares({3.0, 1.0}, 10, 1), (std::vector<int64_t>{8, 2}));
  // 100:1 of 128 with a floor of 8: rank 1 at the floor, rank 0 takes the rest.
  EXPECT_EQ(proportionalShares({100.0, 1.0}, 128, 8), (std::vector<int64_t>{120, 8}));
  // The floor raises two slow ranks, and the two fast ones split the rest 3:1 (75 and 25).
  EXPECT_EQ(proportionalShares({300.0, 100.0, 1.0, 2.0}, 120, 10),
            (std::vector<int64_t>{75, 25, 10, 10}));
}

TEST(ProportionalShares, RandomCasesSumToTheBatchAndRespectTheFloor) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> rate(0.01, 1000.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t p = 1 + static_cast<int64_t>(rng() % 9);
    const int64_t batch = p + static_cast<int64_t>(rng() % 600);
    const int64_t floor = shareFloor(batch, p, 1 + static_cast<int64_t>(rng() % 3));
    std::vector<double> rates(static_cast<size_t>(p));
    for (double& r : rates) r = rng() % 4 == 0 ? 1.0 : rate(rng);  // some exact ties
    const std::vector<int64_t> shares = proportionalShares(rates, batch, floor);
    ASSERT_EQ(shares.size(), rates.size());
    ASSERT_EQ(sum(shares), batch) << "trial " << trial;
    double total_rate = std::accumulate(rates.begin(), rates.end(), 0.0);
    for (size_t r = 0; r < shares.size(); ++r) {
      ASSERT_GE(shares[r], floor) << "trial " << trial << " rank " << r;
      // Above the floor, no rank is more than one sample past its proportional share of the
      // whole batch (the floor only takes samples away from the others).
      const double ideal = static_cast<double>(batch) * rates[r] / total_rate;
      if (shares[r] > floor) {
        ASSERT_LE(static_cast<double>(shares[r]), ideal + 1.0) << trial;
      }
    }
    // The same inputs give the same answer (every rank computes it alone).
    ASSERT_EQ(proportionalShares(rates, batch, floor), shares);
  }
}

TEST(ProportionalShares, RejectsWhatCannotBeShared) {
  EXPECT_THROW(proportionalShares({}, 10, 1), std::invalid_argument);
  EXPECT_THROW(proportionalShares({1.0, 0.0}, 10, 1), std::invalid_argument);
  EXPECT_THROW(proportionalShares({1.0, 1.0}, 10, 6), std::invalid_argument);
  try {
    proportionalShares({1.0, -2.0}, 10, 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "proportionalShares: rank 1's rate -2.000000 is not a positive number");
  }
}

TEST(PredictedSeconds, TheSlowestRankDecides) {
  EXPECT_DOUBLE_EQ(predictedSeconds({64, 64}, {200.0, 100.0}), 0.64);
  EXPECT_DOUBLE_EQ(predictedSeconds({85, 43}, {200.0, 100.0}), 0.43);
}

TEST(DecideShares, MovesWhenTheGainIsWorthIt) {
  // Rank 1 at half speed: equal shares take 64/100 s, 85/43 take 0.43 s: 1.49x.
  const BalanceDecision d = decideShares({200.0, 100.0}, 128, 8, {64, 64}, 0.05);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.shares, (std::vector<int64_t>{85, 43}));
  EXPECT_DOUBLE_EQ(d.current_seconds, 0.64);
  EXPECT_DOUBLE_EQ(d.proposed_seconds, 0.43);
  EXPECT_NEAR(d.predicted_speedup(), 0.64 / 0.43, 1e-12);
}

TEST(DecideShares, HysteresisKeepsTheSharesUnderTheThreshold) {
  // 4% faster rank 0: proportional shares 65/63 would gain 64/63.0 s... under 5%: kept.
  const BalanceDecision small = decideShares({104.0, 100.0}, 128, 8, {64, 64}, 0.05);
  EXPECT_FALSE(small.changed);
  EXPECT_EQ(small.shares, (std::vector<int64_t>{64, 64}));
  EXPECT_GT(small.predicted_speedup(), 1.0);
  EXPECT_LT(small.predicted_speedup(), 1.05);
  // Once balanced, noise around the balanced rates does not move them.
  const BalanceDecision settled = decideShares({195.0, 103.0}, 128, 8, {85, 43}, 0.05);
  EXPECT_FALSE(settled.changed);
  EXPECT_EQ(settled.shares, (std::vector<int64_t>{85, 43}));
  // The slowdown ends: equal rates move them back.
  const BalanceDecision back = decideShares({200.0, 200.0}, 128, 8, {85, 43}, 0.05);
  EXPECT_TRUE(back.changed);
  EXPECT_EQ(back.shares, (std::vector<int64_t>{64, 64}));
}

TEST(DecideShares, KeepsTheSharesUntilEveryRankHasARate) {
  const BalanceDecision d = decideShares({200.0, 0.0}, 128, 8, {70, 58}, 0.05);
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(d.shares, (std::vector<int64_t>{70, 58}));
  EXPECT_THROW(decideShares({1.0, 1.0}, 128, 8, {128}, 0.05), std::invalid_argument);
}

TEST(RateMeter, SkipsTheFirstStepThenAveragesExponentially) {
  RateMeter meter(0.5, 1);
  meter.add(100, 10.0);  // warm-up: not counted
  EXPECT_EQ(meter.rate(), 0.0);
  meter.add(100, 1.0);
  EXPECT_DOUBLE_EQ(meter.rate(), 100.0);
  meter.add(100, 0.5);  // 200 samples/s
  EXPECT_DOUBLE_EQ(meter.rate(), 150.0);
  meter.add(0, 0.1);  // a step with no samples tells nothing
  EXPECT_DOUBLE_EQ(meter.rate(), 150.0);
  meter.reset();
  EXPECT_EQ(meter.rate(), 0.0);
  meter.add(100, 1.0);
  EXPECT_EQ(meter.rate(), 0.0);
}

}  // namespace
}  // namespace cumulus::distributed
