// ProgressMetricsRecorder: which steps make records, the loss summed over ranks only at those, and
// the lines and records a run's events become.
#include "metrics/recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace cumulus::metrics {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> readRecords(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(MetricsRecorderTest, RecordsSumTheLossOverRanksAndAverageTheStepsSinceTheLastOne) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("recorder_" + std::to_string(::getpid()) + ".jsonl");
  std::ostringstream console;
  int sums = 0;
  ProgressRecorderOptions options;
  options.console = &console;
  options.log_every_steps = 4;
  options.metrics_path = path.string();
  options.world_size = 2;
  // The other rank's share equals this one's.
  options.sum_over_ranks = [&](double loss) {
    ++sums;
    return 2 * loss;
  };
  ProgressMetricsRecorder recorder(options);
  recorder.begin({"mlp (10 parameters)", {"resuming from nowhere"}, 0, 8, 4});
  for (int64_t step = 1; step <= 8; ++step) {
    if (step == 1) recorder.firstStep(1, nullptr);
    StepRecord r;
    r.step = step;
    r.epoch = (step + 3) / 4;
    r.loss = 0.125 * static_cast<double>(step);  // exact in binary
    r.lr = 0.5;
    r.seconds = 0.5;
    r.comm_wait_seconds = 0.125;
    r.samples = 64;
    r.elapsed_seconds = 0.5 * static_cast<double>(step);
    recorder.step(r);
  }
  recorder.evaluation(8, 2, {0.25, 0.75});
  recorder.stepsEnded();
  recorder.trained(8, 8, 4.0);
  RunSummary summary;
  summary.steps = 8;
  summary.epochs = 2;
  summary.test = {0.25, 0.75};
  summary.wall_seconds = 4.5;
  summary.parameters = 10;
  summary.parameter_digest = "ab";
  recorder.finished(summary);

  EXPECT_EQ(sums, 3);  // steps 1, 4 and 8, not every step
  EXPECT_EQ(console.str(),
            "model: mlp (10 parameters)\n"
            "resuming from nowhere\n"
            "first step 1 completed\n"
            "epoch 1/2  step 1/8  loss 0.2500  128 samples/s  ETA 0:04\n"
            "epoch 1/2  step 4/8  loss 0.7500  128 samples/s  ETA 0:02\n"
            "epoch 2/2  step 8/8  loss 1.6250  128 samples/s  ETA 0:00\n"
            "eval  epoch 2  step 8  test_loss 0.2500  test_accuracy 0.7500\n"
            "trained 8 steps in 4.000 s\n"
            "final parameters sha256 ab\n"
            "test accuracy 0.7500 (loss 0.2500) after 2 epochs, 8 steps, 4.5 s\n");
  const auto records = readRecords(path);
  ASSERT_EQ(records.size(), 8u);
  EXPECT_EQ(records[0]["type"], "first_step");
  // Step 1: 2·0.125; steps 2-4: 2·(0.25+0.375+0.5)/3; steps 5-8: 2·(0.625+...+1)/4.
  const double losses[] = {0.25, 0.75, 1.625};
  const int64_t steps[] = {1, 4, 8};
  for (int i = 0; i < 3; ++i) {
    const auto& r = records[1 + i];
    EXPECT_EQ(r["type"], "train");
    EXPECT_EQ(r["step"], steps[i]);
    EXPECT_EQ(r["loss"].get<double>(), losses[i]) << r;
    EXPECT_EQ(r["samples_per_sec"].get<double>(), 128.0);
    EXPECT_EQ(r["step_time_ms"].get<double>(), 500.0);
    EXPECT_EQ(r["compute_ms"].get<double>(), 375.0);
    EXPECT_EQ(r["comm_wait_ms"].get<double>(), 125.0);
  }
  EXPECT_EQ(records[4]["type"], "eval");
  EXPECT_EQ(records[5]["type"], "trained");
  // The launch's goodput: 8 steps of 500 ms, 125 of them waiting for the sync.
  const auto& goodput = records[6];
  EXPECT_EQ(goodput["type"], "goodput");
  EXPECT_EQ(goodput["step"], 8);
  EXPECT_EQ(goodput["training_s"].get<double>(), 3.0);
  EXPECT_EQ(goodput["comm_wait_s"].get<double>(), 1.0);
  EXPECT_EQ(goodput["restart_s"].get<double>(), 0.0);
  EXPECT_EQ(goodput["redone_s"].get<double>(), 0.0);
  EXPECT_EQ(records[7]["type"], "summary");
  EXPECT_EQ(records[7]["world_size"], 2);
  fs::remove(path);
}

// The bytes sent go into every train record and the summary as the loop reports them
// (cumulative); the outer rounds of low-communication training only where the loop sets them
// (outer_rounds >= 0). The console's last line says both.
TEST(MetricsRecorderTest, RecordsTheBytesSentAndTheOuterRoundsWhereThereAreAny) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("recorder_comm_" + std::to_string(::getpid()) + ".jsonl");
  std::ostringstream console;
  ProgressRecorderOptions options;
  options.console = &console;
  options.log_every_steps = 2;
  options.metrics_path = path.string();
  ProgressMetricsRecorder recorder(options);
  recorder.begin({"", {}, 0, 4, 4});
  for (int64_t step = 1; step <= 4; ++step) {
    StepRecord r;
    r.step = step;
    r.epoch = 1;
    r.seconds = 0.5;
    r.comm_bytes_sent = 1000 * static_cast<uint64_t>(step);
    if (step > 2) {  // the outer rounds begin at step 3
      r.outer_rounds = step - 2;
      r.outer_wait_seconds = 0.25 * static_cast<double>(step - 2);
    }
    recorder.step(r);
  }
  RunSummary summary;
  summary.steps = 4;
  summary.epochs = 1;
  summary.wall_seconds = 2.0;
  summary.comm_bytes_sent = 1500000;
  summary.outer_rounds = 2;
  summary.outer_wait_seconds = 0.5;
  recorder.finished(summary);
  EXPECT_NE(console.str().find("test loss 0.0000 after 1 epochs, 4 steps, 2.0 s, 1.5 MB sent, "
                               "2 outer rounds (0.5 s waiting)\n"),
            std::string::npos)
      << console.str();
  const auto records = readRecords(path);
  ASSERT_EQ(records.size(), 4u);  // train at steps 1, 2 and 4; the summary
  EXPECT_EQ(records[0]["comm_bytes_sent"], 1000);
  EXPECT_FALSE(records[0].contains("outer_rounds")) << records[0];
  EXPECT_FALSE(records[0].contains("outer_wait_s")) << records[0];
  EXPECT_EQ(records[1]["comm_bytes_sent"], 2000);
  EXPECT_FALSE(records[1].contains("outer_rounds")) << records[1];
  EXPECT_EQ(records[2]["step"], 4);
  EXPECT_EQ(records[2]["comm_bytes_sent"], 4000);
  EXPECT_EQ(records[2]["outer_rounds"], 2);
  EXPECT_EQ(records[2]["outer_wait_s"], 0.5);
  EXPECT_EQ(records[3]["type"], "summary");
  EXPECT_EQ(records[3]["comm_bytes_sent"], 1500000);
  EXPECT_EQ(records[3]["outer_rounds"], 2);
  EXPECT_EQ(records[3]["outer_wait_s"], 0.5);
  fs::remove(path);
}

// mse and module losses have no accuracy: no "accuracy 0" on the console or in the records.
TEST(MetricsRecorderTest, AnEvaluationWithoutAccuracyPrintsAndRecordsTheLossAlone) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("recorder_mse_" + std::to_string(::getpid()) + ".jsonl");
  std::ostringstream console;
  ProgressRecorderOptions options;
  options.console = &console;
  options.metrics_path = path.string();
  ProgressMetricsRecorder recorder(options);
  recorder.begin({"torchscript:m.pt", {}, 0, 4, 4});
  recorder.evaluation(4, 1, {0.125, std::nullopt});
  RunSummary summary;
  summary.steps = 4;
  summary.epochs = 1;
  summary.test = {0.125, std::nullopt};
  summary.wall_seconds = 1.5;
  recorder.finished(summary);
  EXPECT_EQ(console.str(),
            "model: torchscript:m.pt\n"
            "eval  epoch 1  step 4  test_loss 0.1250\n"
            "test loss 0.1250 after 1 epochs, 4 steps, 1.5 s\n");
  const auto records = readRecords(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].dump(0).find("accuracy"), std::string::npos) << records[0];
  EXPECT_EQ(records[0]["test_loss"], 0.125);
  EXPECT_EQ(records[1]["type"], "summary");
  EXPECT_FALSE(records[1].contains("test_accuracy")) << records[1];
  EXPECT_EQ(records[1]["test_loss"], 0.125);
  fs::remove(path);
}

TEST(MetricsRecorderTest, BalanceRecordsAndOneLinePerChange) {
  const fs::path path = fs::path(::testing::TempDir()) /
                        ("recorder_balance_" + std::to_string(::getpid()) + ".jsonl");
  std::ostringstream console;
  ProgressRecorderOptions options;
  options.console = &console;
  options.metrics_path = path.string();
  ProgressMetricsRecorder recorder(options);
  recorder.begin({"mlp", {}, 0, 40, 40});
  BalanceRecord start;
  start.reason = "start";
  start.shares = {64, 64};
  recorder.balanced(start);
  BalanceRecord moved;
  moved.reason = "auto";
  moved.step = 20;
  moved.shares = {85, 43};
  moved.rates = {1520.4, 760.6};
  moved.predicted_speedup = 1.4884;
  recorder.balanced(moved);
  EXPECT_EQ(console.str(),
            "model: mlp\n"
            "balance after step 20: shares 85/43 of the global batch (compute rates 1520/761 "
            "samples/s; predicted 1.49x faster compute)\n");
  const auto records = readRecords(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["type"], "balance");
  EXPECT_EQ(records[0]["reason"], "start");
  EXPECT_EQ(records[0]["step"], 0);
  EXPECT_EQ(records[0]["shares"], nlohmann::json::array({64, 64}));
  EXPECT_EQ(records[0]["rates"], nlohmann::json::array());
  EXPECT_EQ(records[1]["reason"], "auto");
  EXPECT_EQ(records[1]["step"], 20);
  EXPECT_EQ(records[1]["shares"], nlohmann::json::array({85, 43}));
  EXPECT_EQ(records[1]["rates"], nlohmann::json::array({1520.4, 760.6}));
  EXPECT_EQ(records[1]["predicted_speedup"], 1.4884);
  fs::remove(path);
}

TEST(MetricsRecorderTest, EveryFailedSaveIsALineAndARecord) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("recorder_failed_" + std::to_string(::getpid()) + ".jsonl");
  std::ostringstream console;
  ProgressRecorderOptions options;
  options.console = &console;
  options.quiet = true;  // a failure is printed even where routine news is not
  options.metrics_path = path.string();
  ProgressMetricsRecorder recorder(options);
  recorder.begin({"mlp", {}, 0, 40, 40});
  CheckpointFailureRecord first;
  first.step = 16;
  first.error = "/ck/step-00000016.tmp/model.pt: write: No space left on device";
  first.in_a_row = 1;
  first.max_failures = 3;
  recorder.checkpointFailed(first);
  CheckpointFailureRecord second = first;
  second.step = 20;
  second.in_a_row = 2;
  second.newest_valid = "/ck/step-00000012";
  recorder.checkpointFailed(second);
  EXPECT_EQ(console.str(),
            "warning: checkpoint step 16 failed (1 in a row; the run stops at 3): "
            "/ck/step-00000016.tmp/model.pt: write: No space left on device; the newest valid "
            "checkpoint is none yet\n"
            "warning: checkpoint step 20 failed (2 in a row; the run stops at 3): "
            "/ck/step-00000016.tmp/model.pt: write: No space left on device; the newest valid "
            "checkpoint is /ck/step-00000012\n");
  const auto records = readRecords(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1]["type"], "checkpoint_failed");
  EXPECT_EQ(records[1]["step"], 20);
  EXPECT_EQ(records[1]["in_a_row"], 2);
  EXPECT_EQ(records[1]["newest_valid"], "/ck/step-00000012");
  EXPECT_EQ(records[1]["error"], first.error);
  fs::remove(path);
}

TEST(MetricsRecorderTest, AQuietRankPrintsOnlyWarningsAndItsStop) {
  std::ostringstream console;
  ProgressRecorderOptions options;
  options.console = &console;
  options.quiet = true;
  options.log_every_steps = 1;
  ProgressMetricsRecorder recorder(options);
  recorder.begin({"mlp", {}, 0, 4, 4});
  recorder.firstStep(1, nullptr);
  StepRecord r;
  r.step = 1;
  r.epoch = 1;
  recorder.step(r);
  recorder.note("checkpoint requested at step 1; training goes on");
  recorder.warning("warning: checkpoint failed: disk full");
  recorder.preempted(1, "/ckpt/step-00000001");
  recorder.stepsEnded();
  recorder.trained(1, 1, 0.5);
  EXPECT_EQ(console.str(),
            "warning: checkpoint failed: disk full\n"
            "preempted at step 1, checkpoint /ckpt/step-00000001\n");
}

}  // namespace
}  // namespace cumulus::metrics
