#include "launch/spot_trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace cumulus::launch {
namespace {

TEST(SpotTraceTest, SameSeedSameTrace) {
  SpotTraceOptions options;
  options.seed = 42;
  options.mean_interval_s = 60;
  const SpotTrace a(options), b(options);
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(a.launch(i).notice_after_s, b.launch(i).notice_after_s) << i;
  }
  options.seed = 43;
  const SpotTrace c(options);
  int differ = 0;
  for (int64_t i = 0; i < 50; ++i)
    differ += a.launch(i).notice_after_s != c.launch(i).notice_after_s;
  EXPECT_EQ(differ, 50);
}

// Pinned values: the trace is part of an experiment's record, so it must not drift between
// builds. notice = -M log(1 - u), u from SplitMix64.
TEST(SpotTraceTest, PinnedValues) {
  // Computed independently (Python) from the SplitMix64 reference.
  EXPECT_EQ(uniformAt(0, 0), static_cast<double>(0x6e789e6aa1b965f4ULL >> 11) * 0x1.0p-53);
  EXPECT_DOUBLE_EQ(uniformAt(0, 0), 0.43152799704850997);
  EXPECT_DOUBLE_EQ(uniformAt(42, 3), 0.03803016854024621);
  SpotTraceOptions options;
  options.seed = 0;
  options.mean_interval_s = 10;
  options.world_sizes = {2};
  const SpotTrace trace(options);
  EXPECT_NEAR(trace.launch(0).notice_after_s, 5.648032142311613, 1e-12);
  options.seed = 42;
  EXPECT_NEAR(SpotTrace(options).launch(3).notice_after_s, 0.38772189037118987, 1e-12);
  EXPECT_EQ(trace.describe(1), "launch 0: world 2, notice at 5.6 s\n");
}

TEST(SpotTraceTest, ExponentialWithTheGivenMean) {
  SpotTraceOptions options;
  options.seed = 7;
  options.mean_interval_s = 30;
  options.max_preemptions = 1 << 30;
  const SpotTrace trace(options);
  const int n = 20000;
  double sum = 0;
  int below_mean = 0;
  for (int i = 0; i < n; ++i) {
    const double x = trace.launch(i).notice_after_s;
    ASSERT_GE(x, 0);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    below_mean += x < 30;
  }
  // Mean within 3 standard errors (sigma = M for an exponential); P(X < M) = 1 - 1/e = 0.632.
  EXPECT_NEAR(sum / n, 30, 3 * 30 / std::sqrt(n));
  EXPECT_NEAR(static_cast<double>(below_mean) / n, 1 - std::exp(-1.0), 0.015);
}

TEST(SpotTraceTest, WorldSizesCycleAndPreemptionsEnd) {
  SpotTraceOptions options;
  options.world_sizes = {2, 1, 3};
  options.max_preemptions = 4;
  const SpotTrace trace(options);
  const std::vector<int64_t> expect = {2, 1, 3, 2, 1, 3, 2};
  for (int64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(trace.launch(i).world_size, expect[i]);
    EXPECT_EQ(trace.launch(i).preempted(), i < 4) << i;
  }
  options.mean_interval_s = 0;
  EXPECT_FALSE(SpotTrace(options).launch(0).preempted());
}

TEST(SpotTraceTest, ParsesWorldSizes) {
  EXPECT_EQ(parseWorldSizes("2,1,2", "--world-sizes"), (std::vector<int64_t>{2, 1, 2}));
  try {
    parseWorldSizes("2,x", "--world-sizes");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "--world-sizes: 'x' is not a world size (a list like 2,1,2 of integers >= 1)");
  }
  EXPECT_THROW(parseWorldSizes("0", "--world-sizes"), std::invalid_argument);
  EXPECT_THROW(parseWorldSizes("", "--world-sizes"), std::invalid_argument);
  SpotTraceOptions bad;
  bad.notice_s = -1;
  EXPECT_THROW(SpotTrace{bad}, std::invalid_argument);
}

}  // namespace
}  // namespace cumulus::launch
