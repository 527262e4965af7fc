// Bucket layout: reverse registration order, caps, a small first bucket, one dtype per bucket.

#include "distributed/bucket_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace cumulus::distributed {
namespace {

using ::testing::ElementsAre;

std::vector<ParamInfo> floats(const std::vector<size_t>& counts) {
  std::vector<ParamInfo> infos;
  for (size_t n : counts) infos.push_back({n, 4, 0});
  return infos;
}

TEST(BucketLayoutTest, OneBucketHoldsEveryParameterInReverseOrder) {
  const auto buckets = computeBucketLayout(floats({3, 5, 7, 11}), 1 << 20, 1 << 20);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_THAT(buckets[0].params, ElementsAre(3, 2, 1, 0));
  EXPECT_THAT(buckets[0].offsets, ElementsAre(0, 11, 18, 23));
  EXPECT_EQ(buckets[0].numel, 26u);
  EXPECT_EQ(buckets[0].bytes(), 104u);
}

TEST(BucketLayoutTest, TheFirstBucketIsSmallAndTheOthersRespectTheCap) {
  // Ten parameters of 4000 bytes; first cap 4000 B (one parameter), then 12000 B (three).
  const auto buckets = computeBucketLayout(floats(std::vector<size_t>(10, 1000)), 12000, 4000);
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_THAT(buckets[0].params, ElementsAre(9));
  EXPECT_THAT(buckets[1].params, ElementsAre(8, 7, 6));
  EXPECT_THAT(buckets[2].params, ElementsAre(5, 4, 3));
  EXPECT_THAT(buckets[3].params, ElementsAre(2, 1, 0));
  EXPECT_EQ(buckets[0].bytes(), 4000u);
  for (size_t b = 1; b < buckets.size(); ++b) EXPECT_LE(buckets[b].bytes(), 12000u);
}

TEST(BucketLayoutTest, AParameterLargerThanTheCapGetsABucketOfItsOwn) {
  const auto buckets = computeBucketLayout(floats({10, 5000, 10}), 1000, 100);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_THAT(buckets[0].params, ElementsAre(2));
  EXPECT_THAT(buckets[1].params, ElementsAre(1));
  EXPECT_EQ(buckets[1].bytes(), 20000u);
  EXPECT_THAT(buckets[2].params, ElementsAre(0));
}

TEST(BucketLayoutTest, DTypesNeverShareABucketAndEveryParameterAppearsOnce) {
  std::vector<ParamInfo> infos = {{100, 4, 0}, {100, 8, 1}, {100, 4, 0},
                                  {100, 8, 1}, {100, 4, 0}, {100, 2, 2}};
  const auto buckets = computeBucketLayout(infos, 1300, 1300);
  std::multiset<size_t> seen;
  for (const auto& b : buckets) {
    for (size_t i = 0; i < b.params.size(); ++i) {
      seen.insert(b.params[i]);
      EXPECT_EQ(infos[b.params[i]].dtype, b.dtype);
      EXPECT_EQ(infos[b.params[i]].element_size, b.element_size);
      if (i > 0) {
        EXPECT_LT(b.params[i], b.params[i - 1]) << "reverse order within a bucket";
      }
    }
    EXPECT_LE(b.bytes(), 1300u);
  }
  EXPECT_EQ(seen, (std::multiset<size_t>{0, 1, 2, 3, 4, 5}));
  // The float64 bucket {3} closes first when 1 joins (1600 B > 1300 B), then the rest flush in
  // dtype-key order: float32 {4, 2, 0}, float64 {1}, float16 {5}.
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_THAT(buckets[0].params, ElementsAre(3));
  EXPECT_THAT(buckets[1].params, ElementsAre(4, 2, 0));
  EXPECT_THAT(buckets[2].params, ElementsAre(1));
  EXPECT_THAT(buckets[3].params, ElementsAre(5));
}

TEST(BucketLayoutTest, NoParametersNoBuckets) {
  EXPECT_TRUE(computeBucketLayout({}, 100, 100).empty());
}

TEST(BucketLayoutTest, CapsMustBePositive) {
  EXPECT_THROW(computeBucketLayout(floats({1}), 0, 10), std::invalid_argument);
  EXPECT_EQ(mebibytes(25, "comm.bucket_cap_mb"), 25u << 20);
  EXPECT_EQ(mebibytes(0.5, "comm.first_bucket_mb"), 512u << 10);
  try {
    mebibytes(-1, "comm.bucket_cap_mb");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("comm.bucket_cap_mb: must be a positive"));
  }
}

TEST(BucketLayoutTest, DescribeNamesEachBucket) {
  const auto buckets = computeBucketLayout(floats({262144, 262144}), 1 << 20, 1 << 20);
  EXPECT_EQ(describeBuckets(buckets),
            "2 bucket(s): #0 1 param(s) 1.00 MiB, #1 1 param(s) 1.00 MiB");
}

}  // namespace
}  // namespace cumulus::distributed
