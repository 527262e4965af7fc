#include "cumulus/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace cumulus::data {
namespace {

std::vector<int64_t> concatShards(const DistributedSampler& s, int64_t world) {
  std::vector<int64_t> all;
  for (int64_t r = 0; r < world; ++r) {
    const auto shard = s.localIndices(r, world);
    all.insert(all.end(), shard.begin(), shard.end());
  }
  return all;
}

// Every global batch of one epoch, in order.
std::vector<std::vector<int64_t>> epochBatches(DistributedSampler& s) {
  std::vector<std::vector<int64_t>> out;
  const int64_t epoch = s.state().epoch;
  while (s.state().epoch == epoch) {
    out.push_back(s.globalBatch());
    s.advance();
  }
  return out;
}

template <typename Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(SamplerTest, ShardsPartitionTheGlobalBatch) {
  for (const int64_t world : {1, 2, 3, 4, 7, 16}) {
    DistributedSampler s(1000, 64, 42, true, false);
    for (int step = 0; step < s.stepsPerEpoch(); ++step) {
      const auto global = s.globalBatch();
      // Contiguous slices in rank order: their concatenation is the global batch itself.
      EXPECT_EQ(concatShards(s, world), global) << "world " << world << " step " << step;
      std::set<int64_t> seen;
      for (int64_t r = 0; r < world; ++r) {
        const auto shard = s.localIndices(r, world);
        const auto expected =
            static_cast<size_t>((r + 1) * static_cast<int64_t>(global.size()) / world -
                                r * static_cast<int64_t>(global.size()) / world);
        EXPECT_EQ(shard.size(), expected);
        for (const int64_t i : shard) EXPECT_TRUE(seen.insert(i).second) << "index " << i;
      }
      s.advance();
    }
  }
}

TEST(SamplerTest, EpochCoversEveryIndexOnceWithoutDropLast) {
  DistributedSampler s(1003, 100, 7, true, false);
  EXPECT_EQ(s.stepsPerEpoch(), 11);
  const auto batches = epochBatches(s);
  ASSERT_EQ(batches.size(), 11u);
  EXPECT_EQ(batches.back().size(), 3u);  // the last global batch is the remainder
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 1003u);
  for (int64_t i = 0; i < 1003; ++i) ASSERT_EQ(all[i], i);
  EXPECT_EQ(s.state(), (SamplerState{1, 0}));
}

TEST(SamplerTest, DropLastSkipsThePartialBatch) {
  DistributedSampler s(1003, 100, 7, true, true);
  EXPECT_EQ(s.stepsPerEpoch(), 10);
  const auto batches = epochBatches(s);
  ASSERT_EQ(batches.size(), 10u);
  std::set<int64_t> distinct;
  for (const auto& b : batches) {
    EXPECT_EQ(b.size(), 100u);
    distinct.insert(b.begin(), b.end());
  }
  EXPECT_EQ(distinct.size(), 1000u);
  EXPECT_LT(*distinct.rbegin(), 1003);
}

TEST(SamplerTest, ShortLastBatchLeavesSomeRanksEmpty) {
  DistributedSampler s(10, 8, 1, false, false);
  s.advance();
  EXPECT_EQ(s.globalBatch(), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(s.localIndices(0, 4), std::vector<int64_t>{});
  EXPECT_EQ(s.localIndices(1, 4), std::vector<int64_t>{8});
  EXPECT_EQ(s.localIndices(2, 4), std::vector<int64_t>{});
  EXPECT_EQ(s.localIndices(3, 4), std::vector<int64_t>{9});
}

TEST(SamplerTest, NoShuffleIsIdentityOrder) {
  DistributedSampler s(10, 4, 99, false, false);
  EXPECT_EQ(s.globalBatch(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.localIndices(1, 2), (std::vector<int64_t>{2, 3}));
  s.advance();
  s.advance();
  EXPECT_EQ(s.globalBatch(), (std::vector<int64_t>{8, 9}));
  s.advance();
  EXPECT_EQ(s.state(), (SamplerState{1, 0}));
  EXPECT_EQ(s.globalBatch(), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(SamplerTest, OrderDependsOnlyOnSeedAndEpoch) {
  DistributedSampler a(500, 50, 1234, true, false);
  DistributedSampler b(500, 50, 1234, true, false);
  DistributedSampler other_seed(500, 50, 1235, true, false);
  const auto a0 = epochBatches(a);
  EXPECT_EQ(a0, epochBatches(b));
  EXPECT_NE(a0, epochBatches(other_seed));
  const auto a1 = epochBatches(a);
  EXPECT_NE(a0, a1);
  // Restoring to epoch 1 from scratch gives epoch 1's order again.
  DistributedSampler c(500, 50, 1234, true, false);
  c.restore({1, 0});
  EXPECT_EQ(epochBatches(c), a1);
}

// A golden value pins the permutation itself, so a change to the PRNG or the shuffle (which
// would silently break resuming old checkpoints) fails here.
TEST(SamplerTest, PermutationIsPinned) {
  DistributedSampler s(10, 10, 0, true, false);
  EXPECT_EQ(s.globalBatch(), (std::vector<int64_t>{1, 4, 5, 0, 7, 6, 9, 8, 2, 3}));
  s.advance();
  EXPECT_EQ(s.globalBatch(), (std::vector<int64_t>{7, 2, 6, 8, 0, 1, 5, 9, 3, 4}));
}

TEST(SamplerTest, ReshardingMidEpochKeepsGlobalBatches) {
  DistributedSampler two(997, 60, 5, true, false);
  std::vector<std::vector<int64_t>> reference;
  for (int step = 0; step < 40; ++step) {  // runs past the end of epoch 0 (17 steps)
    reference.push_back(concatShards(two, 2));
    two.advance();
  }
  // World 2 runs 7 steps and checkpoints; world 3 resumes from that state.
  DistributedSampler first(997, 60, 5, true, false);
  for (int step = 0; step < 7; ++step) first.advance();
  const SamplerState saved = first.state();
  EXPECT_EQ(saved, (SamplerState{0, 420}));
  DistributedSampler three(997, 60, 5, true, false);
  three.restore(saved);
  for (int step = 7; step < 40; ++step) {
    ASSERT_EQ(concatShards(three, 3), reference[step]) << "step " << step;
    three.advance();
  }
}

TEST(SamplerTest, RestoreValidates) {
  DistributedSampler s(1003, 100, 7, true, true);
  EXPECT_EQ(errorOf([&] {
              s.restore({0, 150});
            }),
            "sampler: cannot restore cursor 150: it is not a multiple of the global batch size "
            "100 (was the checkpoint written with another global batch size?)");
  EXPECT_EQ(errorOf([&] {
              s.restore({0, 1000});
            }),
            "sampler: cannot restore cursor 1000: it must lie in [0, 1000) for a dataset of 1003 "
            "samples with drop_last");
  EXPECT_EQ(errorOf([&] {
              s.restore({0, -100});
            }),
            "sampler: cannot restore cursor -100: it must lie in [0, 1000) for a dataset of 1003 "
            "samples with drop_last");
  EXPECT_EQ(errorOf([&] {
              s.restore({-1, 0});
            }),
            "sampler: cannot restore epoch -1: epochs start at 0");
  EXPECT_EQ(s.state(), (SamplerState{0, 0}));  // a failed restore changes nothing
  DistributedSampler keep(1003, 100, 7, true, false);
  keep.restore({3, 1000});  // without drop_last the short last batch is a valid position
  EXPECT_EQ(keep.globalBatch().size(), 3u);
}

TEST(SamplerTest, ConstructorValidates) {
  EXPECT_EQ(errorOf([] { DistributedSampler(0, 10, 0, true, false); }),
            "sampler: dataset size must be positive, got 0");
  EXPECT_EQ(errorOf([] { DistributedSampler(10, 0, 0, true, false); }),
            "sampler: global batch size must be positive, got 0");
  EXPECT_EQ(errorOf([] { DistributedSampler(10, 11, 0, true, true); }),
            "sampler: global batch size 11 exceeds the dataset size 10 and drop_last leaves no "
            "complete batch; lower the batch size or disable drop_last");
  EXPECT_EQ(DistributedSampler(10, 11, 0, true, false).stepsPerEpoch(), 1);
  DistributedSampler s(10, 5, 0, true, false);
  EXPECT_EQ(errorOf([&] { s.localIndices(2, 2); }),
            "sampler: rank 2 is out of range for world size 2");
}

// Unequal shares: rank r takes [S_r, S_r + s_r) of each full batch; together the ranks cover the
// global batch once, in order.
TEST(SamplerShares, RanksTakeContiguousSlicesOfTheirShares) {
  DistributedSampler s(20, 10, /*seed=*/0, /*shuffle=*/false, /*drop_last=*/false);
  const std::vector<int64_t> shares = {7, 0, 3};
  EXPECT_EQ(s.shareIndices(0, shares), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(s.shareIndices(1, shares), std::vector<int64_t>{});
  EXPECT_EQ(s.shareIndices(2, shares), (std::vector<int64_t>{7, 8, 9}));
  s.advance();
  EXPECT_EQ(s.shareIndices(2, shares), (std::vector<int64_t>{17, 18, 19}));
}

TEST(SamplerShares, ShortLastBatchScalesTheBoundaries) {
  // The last batch of 25 samples in batches of 10 holds 5: boundaries floor(5·S/10) of S = 0,
  // 7, 10.
  DistributedSampler s(25, 10, /*seed=*/0, /*shuffle=*/false, /*drop_last=*/false);
  s.advance();
  s.advance();
  const std::vector<int64_t> shares = {7, 3};
  EXPECT_EQ(s.shareIndices(0, shares), (std::vector<int64_t>{20, 21, 22}));
  EXPECT_EQ(s.shareIndices(1, shares), (std::vector<int64_t>{23, 24}));
}

TEST(SamplerShares, EqualSharesAreExactlyLocalIndicesShortBatchIncluded) {
  // B=4, p=3, b=3 is where floor(b·S_r/B) would disagree with localIndices.
  for (const int64_t size : {3, 7, 9, 10, 23}) {
    for (const int64_t batch : {4, 5, 7, 10}) {
      for (const int64_t world : {1, 2, 3, 4}) {
        if (batch > size) continue;
        DistributedSampler s(size, batch, /*seed=*/3, /*shuffle=*/true, /*drop_last=*/false);
        const auto equal = DistributedSampler::equalShares(batch, world);
        for (int64_t step = 0; step < s.stepsPerEpoch(); ++step) {
          for (int64_t r = 0; r < world; ++r) {
            EXPECT_EQ(s.shareIndices(r, equal), s.localIndices(r, world))
                << "size " << size << " batch " << batch << " world " << world << " step " << step
                << " rank " << r;
          }
          s.advance();
        }
      }
    }
  }
  EXPECT_EQ(DistributedSampler::equalShares(10, 3), (std::vector<int64_t>{3, 3, 4}));
}

TEST(SamplerShares, AnySharesCoverEveryBatchOnceInOrder) {
  DistributedSampler s(23, 8, /*seed=*/5, /*shuffle=*/true, /*drop_last=*/false);
  const std::vector<int64_t> shares = {1, 5, 0, 2};
  for (int64_t step = 0; step < s.stepsPerEpoch(); ++step) {
    std::vector<int64_t> all;
    for (int64_t r = 0; r < 4; ++r) {
      const auto part = s.shareIndices(r, shares);
      all.insert(all.end(), part.begin(), part.end());
    }
    EXPECT_EQ(all, s.globalBatch()) << "step " << step;
    s.advance();
  }
}

TEST(SamplerShares, RejectsBadShares) {
  DistributedSampler s(20, 10, /*seed=*/0, /*shuffle=*/false, /*drop_last=*/false);
  try {
    s.shareIndices(0, {6, 5});
    FAIL() << "a sum of 11 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "sampler: the shares sum to 11, not to the global batch size 10");
  }
  try {
    s.shareIndices(0, {11, -1});
    FAIL() << "a negative share was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "sampler: rank 1's share -1 is negative");
  }
  try {
    s.shareIndices(0, {std::numeric_limits<int64_t>::max(), 1});
    FAIL() << "shares summing past int64 were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "sampler: rank 1's share 1 takes the shares' sum past 2^63 - 1");
  }
  try {
    s.shareIndices(2, {5, 5});
    FAIL() << "rank 2 of 2 shares was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "sampler: rank 2 is out of range for 2 shares");
  }
}

}  // namespace
}  // namespace cumulus::data
