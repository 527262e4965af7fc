// cumulus::BatchShares (<cumulus/batch_shares.h>) over an Elastic loop of ranks as threads: the
// shares follow the rates the ranks measure, every sample of every global batch goes to one rank,
// a change is recorded, and bad options are refused.

#include "cumulus/batch_shares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumulus/elastic.h"
#include "cumulus/recorder.h"
#include "cumulus/sampler.h"
#include "tests/api/elastic_parts.h"
#include "tests/api/ranks.h"
#include "tests/test_dir.h"

namespace cumulus {
namespace {

// Rank r computes at 256 / (r + 1) samples per second, given with measure() so that the test does
// not depend on the machine's speed (binary fractions: every figure is exact). At the first look,
// after step 4, the shares of 12 become 8/4, which predict a step 1.5x faster; every sample of
// each global batch is trained by exactly one rank.
TEST(BatchSharesTest, SharesFollowTheMeasuredRatesAndSplitEachBatchOnce) {
  const std::filesystem::path dir = testing::freshTestDir("batch_shares");
  std::mutex mutex;
  std::vector<std::vector<int64_t>> batches(6);  // the indices trained at each step, all ranks
  testing::runRanks(2, [&](ProcessGroup& group) {
    Elastic elastic(&group, testing::quietOptions());
    elastic.setState({[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "shares"});
    RecorderOptions ro;
    ro.run_dir = dir.string();
    ro.console = nullptr;
    ro.tensorboard = false;
    Recorder recorder(elastic, ro);
    BatchSharesOptions options;
    options.every_steps = 4;
    BatchShares shares(elastic, 12, options, &recorder);
    DistributedSampler sampler(60, 12, 3, /*shuffle=*/true, /*drop_last=*/true);
    ASSERT_TRUE(elastic.start(0));
    EXPECT_EQ(shares.shares(), (std::vector<int64_t>{6, 6}));
    std::vector<bool> changed;
    while (elastic.step() < 6) {
      std::vector<int64_t> local;
      elastic.train([&] {
        local = shares.localIndices(sampler);
        sampler.advance();
      });
      {
        std::lock_guard<std::mutex> lock(mutex);
        auto& all = batches[static_cast<size_t>(elastic.step() - 1)];
        all.insert(all.end(), local.begin(), local.end());
      }
      StepMetrics m;
      m.samples = static_cast<int64_t>(local.size());
      recorder.step(m);
      shares.measure(m.samples, static_cast<double>(m.samples) * (elastic.rank() + 1) / 256.0);
      changed.push_back(shares.rebalance());
    }
    EXPECT_EQ(changed, (std::vector<bool>{false, false, false, true, false, false}));
    // Rank 1 at half speed: proportional shares are 8/4, and a look moves halfway there.
    EXPECT_EQ(shares.shares(), (std::vector<int64_t>{7, 5}));
    EXPECT_EQ(shares.share(), elastic.rank() == 0 ? 7 : 5);
    EXPECT_EQ(shares.rate(), 256.0 / (elastic.rank() + 1));
    recorder.finish();
  });
  DistributedSampler replay(60, 12, 3, true, true);
  for (const std::vector<int64_t>& trained : batches) {
    std::vector<int64_t> sorted = trained, expected = replay.globalBatch();
    std::sort(sorted.begin(), sorted.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(sorted, expected);
    replay.advance();
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> balance;
  while (std::getline(in, line)) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["type"] == "balance") balance.push_back(r);
  }
  ASSERT_EQ(balance.size(), 2u);
  EXPECT_EQ(balance[0]["reason"], "start");  // the launch's shares, after its first step
  EXPECT_EQ(balance[0]["step"], 1);
  EXPECT_EQ(balance[0]["shares"], (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(balance[0]["rates"], std::vector<double>{});
  EXPECT_EQ(balance[1]["reason"], "auto");
  EXPECT_EQ(balance[1]["step"], 4);
  EXPECT_EQ(balance[1]["shares"], (std::vector<int64_t>{7, 5}));
  EXPECT_EQ(balance[1]["rates"], (std::vector<double>{256, 128}));
  EXPECT_EQ(balance[1]["predicted_speedup"], 1.2);  // 6/128 s against 5/128 s
}

// What a launch's BatchShares::restore() takes: the saved shares when they fit its membership and
// batch, equal shares otherwise; a restore after the first shares were taken changes nothing.
TEST(BatchSharesTest, ALaunchOfAsManyMembersTakesTheSavedShares) {
  struct Seen {
    std::vector<int64_t> shares;
    bool restored = false;
    std::vector<int64_t> local;
  };
  const auto launch = [](const std::vector<int64_t>& saved) {
    std::vector<Seen> seen(2);
    testing::runRanks(2, [&](ProcessGroup& group) {
      Elastic elastic(&group, testing::quietOptions());
      elastic.setState({[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "shares"});
      BatchShares shares(elastic, 12);
      shares.restore(saved);  // as the program's restore does, before start()
      DistributedSampler sampler(60, 12, 3, /*shuffle=*/true, /*drop_last=*/true);
      ASSERT_TRUE(elastic.start(0));
      Seen& mine = seen[static_cast<size_t>(elastic.rank())];
      mine.local = shares.localIndices(sampler);
      shares.restore({11, 1});  // too late: the launch's shares are taken
      mine.shares = shares.shares();
      mine.restored = shares.restored();
    });
    return seen;
  };
  const std::vector<Seen> resumed = launch({7, 5});
  DistributedSampler sampler(60, 12, 3, true, true);
  const std::vector<int64_t> batch = sampler.globalBatch();
  for (int rank = 0; rank < 2; ++rank) {
    const Seen& s = resumed[static_cast<size_t>(rank)];
    EXPECT_EQ(s.shares, (std::vector<int64_t>{7, 5}));
    EXPECT_TRUE(s.restored);
    const auto first = batch.begin() + (rank == 0 ? 0 : 7);
    EXPECT_EQ(s.local, std::vector<int64_t>(first, first + (rank == 0 ? 7 : 5)));
  }
  // Saved for three members, for a batch of 13, with a share under the floor of one sample, or
  // none at all: equal shares.
  for (const std::vector<int64_t>& saved :
       std::vector<std::vector<int64_t>>{{4, 4, 4}, {7, 6}, {12, 0}, {}}) {
    for (const Seen& s : launch(saved)) {
      EXPECT_EQ(s.shares, (std::vector<int64_t>{6, 6})) << saved.size();
      EXPECT_FALSE(s.restored);
    }
  }
}

TEST(BatchSharesTest, BadOptionsAreRefusedNamingThem) {
  Elastic elastic(nullptr, testing::quietOptions());
  try {
    BatchShares shares(elastic, 0);
    ADD_FAILURE() << "a batch of 0 was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "BatchShares: the global batch, every_steps and micro_batches must be >= 1 and "
                 "min_gain >= 0 (got 0, 20, 1, 0.050000)");
  }
  BatchSharesOptions options;
  options.min_gain = -1;
  EXPECT_THROW(BatchShares(elastic, 8, options), std::invalid_argument);
  BatchShares alone(elastic, 8);
  EXPECT_EQ(alone.shares(), (std::vector<int64_t>{8}));
  EXPECT_FALSE(alone.rebalance());
}

}  // namespace
}  // namespace cumulus
