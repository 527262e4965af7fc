#include "distributed/balance.h"

#include <gtest/gtest.h>

#include <cmath>
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

TEST(ProportionalShares, AFixedPartGivesEveryRankTheSameTime) {
  // A step of (88 + share) / rate seconds, rank 1 at half speed: T = (384 + 176) / 300, shares
  // T·rate - 88 = 285.33 and 98.67; rank 1 takes the larger remainder.
  const std::vector<int64_t> shares = proportionalShares({200.0, 100.0}, 384, 24, {88.0, 88.0});
  EXPECT_EQ(shares, (std::vector<int64_t>{285, 99}));
  EXPECT_DOUBLE_EQ(predictedSeconds(shares, {200.0, 100.0}, {88.0, 88.0}), 1.87);
  // Proportional to the rates alone (256/128) rank 0 would finish at 1.72 s and rank 1 at 2.16 s.
  EXPECT_DOUBLE_EQ(predictedSeconds({256, 128}, {200.0, 100.0}, {88.0, 88.0}), 2.16);
  // No fixed part is the proportional split.
  EXPECT_EQ(proportionalShares({200.0, 100.0}, 384, 24, {0.0, 0.0}),
            proportionalShares({200.0, 100.0}, 384, 24));
  // A fixed part larger than a rank's time at any share puts it at the floor.
  EXPECT_EQ(proportionalShares({1000.0, 10.0}, 128, 8, {0.0, 50.0}),
            (std::vector<int64_t>{120, 8}));
  EXPECT_THROW(proportionalShares({1.0, 1.0}, 128, 8, {1.0}), std::invalid_argument);
  EXPECT_THROW(proportionalShares({1.0, 1.0}, 128, 8, {1.0, -1.0}), std::invalid_argument);
  EXPECT_THROW(proportionalShares({1.0, 1.0}, 128, 8, {1.0, std::nan("")}), std::invalid_argument);
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

TEST(DecideShares, APartWayMoveGoesThatFarWithTheSameSum) {
  // Proposed 85/43 from 64/64: halfway is 74.5/53.5, truncated towards the current shares to
  // 74/54 (the sum kept).
  const BalanceDecision half = decideShares({200.0, 100.0}, 128, 8, {64, 64}, 0.05, {}, 0.5);
  EXPECT_TRUE(half.changed);
  EXPECT_EQ(half.shares, (std::vector<int64_t>{74, 54}));
  EXPECT_DOUBLE_EQ(half.current_seconds, 0.64);
  EXPECT_DOUBLE_EQ(half.proposed_seconds, 0.54);  // of the shares taken
  // Three ranks, 10 each towards 13/13/4: halves 1.5, 1.5, -3 truncate to 1, 1, -3; the sample
  // left over goes to the first rank short of its target.
  EXPECT_EQ(proportionalShares({130.0, 130.0, 40.0}, 30, 1), (std::vector<int64_t>{13, 13, 4}));
  const BalanceDecision three =
      decideShares({130.0, 130.0, 40.0}, 30, 1, {10, 10, 10}, 0.05, {}, 0.5);
  EXPECT_EQ(three.shares, (std::vector<int64_t>{12, 11, 7}));
  EXPECT_DOUBLE_EQ(three.proposed_seconds, 7.0 / 40.0);
  // A move too small to shift a whole sample changes nothing.
  const BalanceDecision tiny = decideShares({200.0, 100.0}, 128, 8, {84, 44}, 0.0, {}, 0.5);
  EXPECT_FALSE(tiny.changed);
  EXPECT_EQ(tiny.shares, (std::vector<int64_t>{84, 44}));
  EXPECT_THROW(decideShares({1.0, 1.0}, 128, 8, {64, 64}, 0.05, {}, 0.0), std::invalid_argument);
  EXPECT_THROW(decideShares({1.0, 1.0}, 128, 8, {64, 64}, 0.05, {}, 1.5), std::invalid_argument);
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

// `steps` steps of `samples` each, every one in (fixed + samples) / speed seconds.
void stepAt(RateMeter& meter, int64_t samples, int steps, double fixed, double speed) {
  for (int i = 0; i < steps; ++i) {
    meter.add(samples, (fixed + static_cast<double>(samples)) / speed);
  }
}

TEST(RateMeter, FitsTheFixedPartOfAStepFromTwoShares) {
  RateMeter meter(0.5, 1);
  stepAt(meter, 100, 5, 50, 1000);  // 0.15 s a step
  EXPECT_NEAR(meter.rate(), 100 / 0.15, 1e-9);
  stepAt(meter, 200, 5, 50, 1000);  // 0.25 s a step
  EXPECT_EQ(meter.fixed(), 0.0);    // the line is drawn when the second share ends
  EXPECT_DOUBLE_EQ(meter.speed(), meter.rate());
  stepAt(meter, 150, 1, 50, 1000);
  EXPECT_NEAR(meter.fixed(), 50.0, 1e-9);
  EXPECT_NEAR(meter.speed(), 1000.0, 1e-9);  // from the share before, until this one has a step
  // The machine gets twice as slow: the speed follows at the same share, the fixed part stays.
  stepAt(meter, 150, 30, 50, 500);
  EXPECT_NEAR(meter.fixed(), 50.0, 1e-9);
  EXPECT_NEAR(meter.speed(), 500.0, 1e-6);
  meter.reset();
  EXPECT_EQ(meter.fixed(), 0.0);
  EXPECT_EQ(meter.speed(), 0.0);
}

TEST(RateMeter, AFitItCannotTrustSaysNoFixedPartOrABoundedOne) {
  RateMeter close(0.5, 0);
  stepAt(close, 100, 5, 50, 1000);
  stepAt(close, 105, 5, 50, 1000);  // shares under a tenth apart: no slope
  stepAt(close, 150, 1, 50, 1000);
  EXPECT_EQ(close.fixed(), 0.0);
  RateMeter falling(0.5, 0);
  stepAt(falling, 100, 5, 50, 1000);
  stepAt(falling, 200, 5, 0, 2000);  // faster with more samples: no fixed part to speak of
  stepAt(falling, 150, 1, 0, 2000);
  EXPECT_EQ(falling.fixed(), 0.0);
  RateMeter flat(0.5, 0);
  stepAt(flat, 100, 5, 10000, 1000);
  stepAt(flat, 200, 5, 10000, 1000);  // almost all fixed: bounded at twice the larger share
  stepAt(flat, 150, 1, 10000, 1000);
  EXPECT_DOUBLE_EQ(flat.fixed(), 400.0);
  RateMeter short_lived(0.5, 0);
  stepAt(short_lived, 100, 5, 50, 1000);
  stepAt(short_lived, 200, 2, 50, 1000);  // one step counted: too few to draw a line through
  stepAt(short_lived, 150, 1, 50, 1000);
  EXPECT_EQ(short_lived.fixed(), 0.0);
}

}  // namespace
}  // namespace cumulus::distributed
