// SamplerBatchSource (the default BatchSource) and LedgerBatchSource (the ledger-writing wrapper
// cumulus-train-faults installs).
#include "trainer/batch_source.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "data/dataset.h"
#include "tests/trainer/fault_parts.h"
#include "trainer/resume.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;

// Row i holds the value i everywhere, and label i % 10, so a batch shows which rows it holds.
data::TensorDataset numbered(int64_t n) {
  data::TensorDataset d;
  d.inputs = torch::arange(n, torch::kFloat32).reshape({n, 1, 1, 1}).expand({n, 1, 2, 2}).clone();
  d.targets = torch::arange(n, torch::kInt64).remainder(10);
  return d;
}

std::vector<int64_t> rowsOf(const data::Batch& batch) {
  std::vector<int64_t> rows;
  if (!batch.inputs.defined()) return rows;
  for (int64_t i = 0; i < batch.inputs.size(0); ++i) {
    rows.push_back(static_cast<int64_t>(batch.inputs[i][0][0][0].item<float>()));
  }
  return rows;
}

TEST(BatchSourceTest, EachRankGetsItsSliceOfTheGlobalBatchInContiguousMicroBatches) {
  // 20 samples, global batch 8: steps of 8, 8, 4.
  const cumulus::DistributedSampler sampler(20, 8, /*seed=*/3, /*shuffle=*/true,
                                            /*drop_last=*/false);
  SamplerBatchSource rank1(data::inMemory(numbered(20), "numbered"), sampler, /*rank=*/1,
                           /*world_size=*/2);
  cumulus::DistributedSampler reference = sampler;
  EXPECT_EQ(rank1.stepsPerEpoch(), 3);
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<int64_t> expected = reference.localIndices(1, 2);
    const StepBatch batch = rank1.next(step, /*micro_batches=*/3);
    EXPECT_EQ(batch.epoch, 0);
    EXPECT_EQ(batch.global_samples, step < 2 ? 8 : 4);
    EXPECT_EQ(batch.indices, expected);
    ASSERT_EQ(batch.micro_batches.size(), 3u);
    // n rows in 3 parts: [0, n/3), [n/3, 2n/3), [2n/3, n).
    const auto n = static_cast<int64_t>(expected.size());
    std::vector<int64_t> joined;
    for (int64_t i = 0; i < 3; ++i) {
      const std::vector<int64_t> rows = rowsOf(batch.micro_batches[i]);
      EXPECT_EQ(static_cast<int64_t>(rows.size()), (i + 1) * n / 3 - i * n / 3);
      joined.insert(joined.end(), rows.begin(), rows.end());
    }
    EXPECT_EQ(joined, expected);
    reference.advance();
    EXPECT_EQ(rank1.position(), reference.state());
  }
  EXPECT_EQ(rank1.position().epoch, 1);
}

TEST(BatchSourceTest, AnEmptyShareHasEmptyMicroBatchesAndRestoreMovesThePosition) {
  // The last batch of 2 samples leaves nothing for rank 0 of 3 (its slice is [0, 2·0/3)).
  const cumulus::DistributedSampler sampler(10, 8, 3, true, false);
  SamplerBatchSource rank0(data::inMemory(numbered(10), "numbered"), sampler, 0, 3);
  rank0.restore({0, 8});
  const StepBatch batch = rank0.next(1, 2);
  EXPECT_EQ(batch.global_samples, 2);
  EXPECT_TRUE(batch.indices.empty());
  ASSERT_EQ(batch.micro_batches.size(), 2u);
  EXPECT_FALSE(batch.micro_batches[0].inputs.defined());
  EXPECT_FALSE(batch.micro_batches[1].targets.defined());
  EXPECT_EQ(rank0.position(), (cumulus::SamplerState{1, 0}));
  EXPECT_THROW(rank0.restore({0, 3}), std::invalid_argument);
}

// A wrapper that changes nothing: ForwardingBatchSource passes setShares on.
class Passthrough final : public ForwardingBatchSource {
 public:
  using ForwardingBatchSource::ForwardingBatchSource;
  StepBatch next(int64_t step, int64_t micro_batches) override {
    return inner_->next(step, micro_batches);
  }
};

TEST(BatchSourceTest, SharesMoveTheSlicesUntilAReshardMakesThemEqual) {
  const cumulus::DistributedSampler sampler(20, 8, 3, true, false);
  auto rank1 =
      std::make_shared<SamplerBatchSource>(data::inMemory(numbered(20), "numbered"), sampler, 1, 2);
  // Through a wrapper, as the trainer may see it.
  const auto wrapper = std::make_shared<Passthrough>(rank1);
  BatchSource& source = *wrapper;
  source.setShares({6, 2});
  cumulus::DistributedSampler reference = sampler;
  StepBatch batch = source.next(0, 2);
  EXPECT_EQ(batch.indices, reference.shareIndices(1, {6, 2}));
  EXPECT_EQ(batch.indices.size(), 2u);
  EXPECT_EQ(batch.global_samples, 8);
  EXPECT_EQ(rowsOf(batch.micro_batches[0]).size(), 1u);
  // Bad shares are refused and the ones in force stay.
  EXPECT_THROW(source.setShares({6, 1}), std::invalid_argument);
  EXPECT_THROW(source.setShares({2, 2, 4}), std::invalid_argument);
  reference.advance();
  EXPECT_EQ(source.next(1, 1).indices, reference.shareIndices(1, {6, 2}));
  // Rank 0 of 1 after a re-forming: equal shares, the whole batch.
  source.reshard(0, 1);
  reference.advance();
  EXPECT_EQ(source.next(2, 1).indices, reference.localIndices(0, 1));
}

// A BatchSource that does not override setShares cannot be balanced.
TEST(BatchSourceTest, TheDefaultSetSharesSaysWhatToDo) {
  class Fixed final : public BatchSource {
   public:
    int64_t stepsPerEpoch() const override { return 1; }
    cumulus::SamplerState position() const override { return {}; }
    void restore(const cumulus::SamplerState&) override {}
    StepBatch next(int64_t, int64_t) override { return {}; }
  } fixed;
  try {
    fixed.setShares({1, 1});
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "this BatchSource cannot take unequal shares of the global batch; override "
                 "BatchSource::setShares or set trainer.balance: off");
  }
}

TEST(BatchSourceTest, TheLedgerWrapperAppendsEachStepsSamplesAndPassesTheBatchOn) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("ledger_" + std::to_string(::getpid()) + ".rank1");
  fs::remove(path);
  { std::ofstream(path) << ledgerLine(5, 0, 0, 1, {7}); }  // an earlier launch's line stays
  const cumulus::DistributedSampler sampler(20, 8, 3, true, false);
  cumulus::DistributedSampler reference = sampler;
  std::vector<std::string> expected = {ledgerLine(5, 0, 0, 1, {7})};
  {
    LedgerBatchSource ledger(
        std::make_shared<SamplerBatchSource>(data::inMemory(numbered(20), "numbered"), sampler, 1,
                                             2),
        path.string(), [] { return int64_t{9}; } /*launch*/, [] { return int64_t{1}; } /*rank*/);
    for (int64_t step = 0; step < 4; ++step) {  // into the second epoch
      const cumulus::SamplerState at = reference.state();
      const std::vector<int64_t> indices = reference.localIndices(1, 2);
      expected.push_back(ledgerLine(9, at.epoch, step, 1, indices));
      const StepBatch batch = ledger.next(step, 1);
      EXPECT_EQ(batch.indices, indices);
      EXPECT_EQ(rowsOf(batch.micro_batches[0]), indices);
      reference.advance();
      EXPECT_EQ(ledger.position(), reference.state());
    }
  }
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string joined;
  for (const auto& line : expected) joined += line;
  EXPECT_EQ(text, joined);
  SampleLedger book;
  book.readFile(path.string());
  EXPECT_EQ(book.records(), 5u);
  EXPECT_EQ(book.epochs(), (std::set<int64_t>{0, 1}));
  fs::remove(path);
}

TEST(BatchSourceTest, TheLedgerWrapperNamesAFileItCannotOpen) {
  const cumulus::DistributedSampler sampler(20, 8, 3, true, false);
  try {
    LedgerBatchSource ledger(
        std::make_shared<SamplerBatchSource>(data::inMemory(numbered(20), "numbered"), sampler, 0,
                                             1),
        "/nonexistent-dir/ledger.rank0", [] { return int64_t{1}; }, [] { return int64_t{0}; });
    FAIL() << "opened";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "/nonexistent-dir/ledger.rank0: cannot open the sample ledger for appending");
  }
}

}  // namespace
}  // namespace cumulus::trainer
