// trainer.balance with real processes: two cumulus-train workers under cumulus-run, on
// configs/smoke.yaml (a global batch of 64, 16 steps an epoch, 2 epochs). The final parameters
// are compared through the "final parameters sha256" line rank 0 prints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/test_dir.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::digestOf;
using cumulus::testing::ProcessResult;
using cumulus::testing::runProcess;
using cumulus::testing::withFaults;
using Args = std::vector<std::string>;

class BalanceProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cumulus::testing::freshTestDir("balance"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  Args train(const std::string& run, Args extra = {}) {
    Args argv = {cumulus::testing::kTrain, CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "--set",
                 "trainer.run_dir=" + (dir_ / run).string()};
    for (auto& e : extra) argv.push_back(std::move(e));
    return argv;
  }
  Args group(Args train_argv) {
    return cumulus::testing::groupOf(2, (dir_ / "logs").string(), std::move(train_argv));
  }
  // The "balance" records of a run's metrics.jsonl, in order.
  std::vector<nlohmann::json> balanceRecords(const std::string& run) {
    std::ifstream in(dir_ / run / "metrics.jsonl");
    std::vector<nlohmann::json> records;
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.at("type") == "balance") records.push_back(std::move(j));
    }
    return records;
  }

  fs::path dir_;
};

// A run with fixed shares stopped at step 9 and resumed with balance auto, which does not look
// again before the run ends: the shares in force come from the checkpoint alone, and the resumed
// run is bit-identical with the uninterrupted one. Resumed with equal shares instead, it is not
// (the summation order differs), which shows that the comparison can tell.
TEST_F(BalanceProcessTest, AResumeReplaysTheSharesInForceBitIdentical) {
  const Args fixed = {"--set", "trainer.balance=fixed", "--set", "trainer.balance_shares=[44,20]"};
  const std::string expected =
      digestOf(runProcess(group(train("base", fixed)), {{"CUMULUS_RUN_ID", ""}}));
  const ProcessResult first =
      runProcess(group(withFaults({"--fault-sigterm-at-step", "9:1"}, train("x", fixed))));
  ASSERT_EQ(first.exit_code, 75) << first.output;

  const Args auto_args = {"--set", "trainer.balance=auto", "--set",
                          "trainer.balance_every_steps=1000"};
  const ProcessResult second = runProcess(group(train("x", auto_args)));
  EXPECT_NE(second.output.find("at step 9"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("batch shares 44/20 from the checkpoint"), std::string::npos)
      << second.output;
  EXPECT_EQ(digestOf(second), expected);
  const std::vector<nlohmann::json> records = balanceRecords("x");
  ASSERT_EQ(records.size(), 2u);  // the first launch's start, and the resumed launch's
  EXPECT_EQ(records[0].at("step"), 0);
  EXPECT_EQ(records[1].at("step"), 9);
  EXPECT_EQ(records[1].at("reason"), "start");
  EXPECT_EQ(records[1].at("shares"), nlohmann::json::array({44, 20}));

  Args equal = {"--resume", (dir_ / "x" / "checkpoints" / "step-00000009").string(), "--set",
                "trainer.balance=off"};
  EXPECT_NE(digestOf(runProcess(group(train("x", equal)))), expected);
}

// Rank 1 sleeps 2 ms per sample: after the first look (step 4) it takes fewer samples, rank 0
// more, the global batch is kept, and the record says why.
TEST_F(BalanceProcessTest, AutoMovesSamplesOffASlowWorker) {
  const ProcessResult run = runProcess(group(withFaults(
      {"--fault-slow", "1+2000"},
      train("auto", {"--set", "trainer.balance=auto", "--set", "trainer.balance_every_steps=4",
                     "--set", "trainer.max_steps=12"}))));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<nlohmann::json> records = balanceRecords("auto");
  ASSERT_GE(records.size(), 2u) << run.output;
  EXPECT_EQ(records[0].at("reason"), "start");
  EXPECT_EQ(records[0].at("shares"), nlohmann::json::array({32, 32}));
  const nlohmann::json& moved = records[1];
  EXPECT_EQ(moved.at("reason"), "auto");
  EXPECT_EQ(moved.at("step"), 4);
  const auto shares = moved.at("shares").get<std::vector<int64_t>>();
  const auto rates = moved.at("rates").get<std::vector<double>>();
  ASSERT_EQ(shares.size(), 2u);
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_EQ(shares[0] + shares[1], 64);
  EXPECT_GE(shares[1], 4);  // the floor: 64 / (8 * 2)
  EXPECT_LT(shares[1], shares[0]);
  EXPECT_LT(rates[1], 600.0);  // at most 500 samples/s asleep, less with the compute
  EXPECT_GT(rates[0], rates[1]);
  EXPECT_GT(moved.at("predicted_speedup").get<double>(), 1.05);
  EXPECT_NE(run.output.find("balance after step 4: shares " + std::to_string(shares[0]) + "/" +
                            std::to_string(shares[1])),
            std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace cumulus::trainer
