// cumulus::Recorder (<cumulus/recorder.h>) over an Elastic loop of ranks as threads: the records
// cumulus-train writes (train, eval, scalar, goodput, trained, summary) with the loss as the mean
// over the group's samples, the goodput split from the time Elastic accounts for itself, and the
// bad input the header names.

#include "cumulus/recorder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumulus/elastic.h"
#include "tests/api/elastic_parts.h"
#include "tests/api/ranks.h"
#include "tests/test_dir.h"

namespace cumulus {
namespace {

using testing::CheckpointAt;
using testing::quietOptions;

std::vector<nlohmann::json> readRecords(const std::filesystem::path& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) records.push_back(nlohmann::json::parse(line));
  return records;
}

std::vector<nlohmann::json> ofType(const std::vector<nlohmann::json>& records,
                                   const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& r : records) {
    if (r.value("type", "") == type) out.push_back(r);
  }
  return out;
}

// A recorder into `dir` of `total_steps` steps, with no console and no TensorBoard.
RecorderOptions silentInto(const std::filesystem::path& dir, int64_t total_steps = 0) {
  RecorderOptions ro;
  ro.run_dir = dir.string();
  ro.total_steps = total_steps;
  ro.console = nullptr;
  ro.tensorboard = false;
  return ro;
}

// Quiet options whose boundaries agree on a checkpoint after step 3.
ElasticOptions checkpointingAtStep3() {
  ElasticOptions options = quietOptions();
  options.stop = [](std::shared_ptr<StopAgreement> standard) {
    return std::make_shared<CheckpointAt>(std::move(standard), 3);
  };
  return options;
}

// Two ranks train 5 steps; rank r reports a mean loss of r + 1 over r + 2 samples (uneven
// shares): the records' loss is the mean over the group's 5 samples, (1·2 + 2·3) / 5 = 1.6.
TEST(RecorderTest, AnElasticLoopWritesTheRecordsCumulusTrainWrites) {
  const std::filesystem::path dir = testing::freshTestDir("recorder");
  testing::runRanks(2, [&](ProcessGroup& group) {
    Elastic elastic(&group, checkpointingAtStep3());
    elastic.setState({[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "recorder"});
    torch::Tensor w = torch::zeros({4}, torch::requires_grad());
    elastic.attach({w});
    RecorderOptions ro;
    ro.run_dir = dir.string();
    ro.total_steps = 5;
    ro.log_every_steps = 2;
    ro.console = nullptr;
    Recorder recorder(elastic, ro);
    ASSERT_TRUE(elastic.start(0));
    while (elastic.step() < 5) {
      elastic.train([&] {
        elastic.sync().backward((w * static_cast<double>(elastic.rank() + 1)).sum());
        w.mutable_grad().zero_();
      });
      StepMetrics m;
      m.loss = elastic.rank() + 1.0;
      m.samples = elastic.rank() + 2;
      m.global_samples = 5;
      m.lr = 0.125;
      recorder.step(m);
      recorder.scalar("grad_norm", 0.5 * static_cast<double>(elastic.step()));
      if (elastic.step() == 5) break;
      if (elastic.boundary() == ElasticAction::kCheckpoint) {
        std::ofstream(dir / ("save_" + std::to_string(elastic.rank()))) << "a save";
      }
    }
    recorder.evaluation(0.75, 0.5, 0.25);
    recorder.finish();
    const ElasticTimes& t = elastic.times();
    EXPECT_GT(t.train, 0);
    EXPECT_GT(t.comm_wait, 0);
    EXPECT_LE(t.comm_wait, t.train);
    EXPECT_GT(t.boundary, 0);
    EXPECT_GT(t.checkpoint, 0);  // the save after step 3's boundary, until the next train()
    EXPECT_EQ(t.reforms, 0);
    const Goodput g = recorder.goodput();
    EXPECT_DOUBLE_EQ(g.checkpoint, t.checkpoint);
    EXPECT_DOUBLE_EQ(g.evaluation, 0.25);
    EXPECT_NEAR(g.training + g.comm_wait, t.train, 1e-9);
    EXPECT_DOUBLE_EQ(g.comm_wait, t.comm_wait);
    EXPECT_GT(g.wall, g.training);
    EXPECT_EQ(recorder.dropped(), 0);
    EXPECT_THROW(recorder.step(StepMetrics{}), std::logic_error);
    // The group's collectives by kind: 5 gradient syncs (one bucket each), the loss at 4 records
    // and the boundaries' agreements, with the bytes they sent.
    const std::vector<CollectiveStats> ops = group.collectiveStats();
    uint64_t bytes = 0;
    for (const CollectiveStats& op : ops) {
      EXPECT_GT(op.count, 0u) << op.op;
      bytes += op.bytes_sent;
    }
    ASSERT_FALSE(ops.empty());
    EXPECT_EQ(ops.front().op, "allgather");  // in name order
    EXPECT_EQ(bytes, group.bytesSent());
    const auto allreduce = std::find_if(
        ops.begin(), ops.end(), [](const CollectiveStats& s) { return s.op == "allreduce"; });
    ASSERT_NE(allreduce, ops.end());
    EXPECT_GE(allreduce->count, 9u);
    EXPECT_GT(allreduce->seconds, 0);
  });
  const std::vector<nlohmann::json> records = readRecords(dir / "metrics.jsonl");
  ASSERT_FALSE(records.empty());
  const auto train = ofType(records, "train");
  ASSERT_EQ(train.size(), 4u);  // steps 1, 2, 4 and 5
  const int64_t steps[] = {1, 2, 4, 5};
  for (size_t i = 0; i < train.size(); ++i) {
    EXPECT_EQ(train[i]["step"], steps[i]);
    EXPECT_NEAR(train[i]["loss"].get<double>(), 1.6, 1e-12) << train[i].dump();
    EXPECT_EQ(train[i]["lr"], 0.125);
    EXPECT_GT(train[i]["samples_per_sec"].get<double>(), 0);
    EXPECT_GT(train[i]["comm_bytes_sent"].get<uint64_t>(), 0u);
  }
  // Written at the steps with a train record, the mean since the last write: 3's and 4's at 4.
  const auto scalars = ofType(records, "scalar");
  ASSERT_EQ(scalars.size(), 4u);
  EXPECT_EQ(scalars[2]["name"], "grad_norm");
  EXPECT_EQ(scalars[2]["step"], 4);
  EXPECT_EQ(scalars[2]["value"], 1.75);
  EXPECT_EQ(scalars[3]["step"], 5);
  EXPECT_EQ(scalars[3]["value"], 2.5);
  const auto eval = ofType(records, "eval");
  ASSERT_EQ(eval.size(), 1u);
  EXPECT_EQ(eval[0]["test_loss"], 0.75);
  EXPECT_EQ(eval[0]["test_accuracy"], 0.5);
  ASSERT_EQ(ofType(records, "first_step").size(), 1u);
  const auto trained = ofType(records, "trained");
  ASSERT_EQ(trained.size(), 1u);
  EXPECT_EQ(trained[0]["steps"], 5);
  const auto goodput = ofType(records, "goodput");
  ASSERT_EQ(goodput.size(), 1u);
  EXPECT_GT(goodput[0]["checkpoint_s"].get<double>(), 0);
  EXPECT_EQ(goodput[0]["evaluation_s"], 0.25);
  const auto summary = ofType(records, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["steps"], 5);
  EXPECT_EQ(summary[0]["test_loss"], 0.75);
  EXPECT_EQ(summary[0]["world_size"], 2);
  // The writing rank's TensorBoard events file, at its first record.
  size_t events = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "tensorboard")) {
    events += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(events, 1u);
}

// Rank 0 saves after step 2 (a save that fails), after step 3 (a boundary that agreed
// kCheckpoint, whose save Elastic times too) and after step 4 (the program's own schedule): a
// checkpoint record for each save, a checkpoint_failed record for the failed one, and each
// save's time counted once in the goodput's checkpoint time.
TEST(RecorderTest, ARecordedSaveIsMarkedAndItsStallCountedOnce) {
  const std::filesystem::path dir = testing::freshTestDir("recorder");
  testing::runRanks(2, [&](ProcessGroup& group) {
    Elastic elastic(&group, checkpointingAtStep3());
    elastic.setState({[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "recorder"});
    Recorder recorder(elastic, silentInto(dir, 5));
    ASSERT_TRUE(elastic.start(0));
    double saves_after_3 = 0;  // rank 0's recorded stalls after the kCheckpoint one
    while (elastic.step() < 5) {
      elastic.train([] {});
      StepMetrics m;
      m.samples = 1;
      recorder.step(m);
      if (elastic.step() == 5) break;
      const ElasticAction action = elastic.boundary();
      const int64_t step = elastic.step();
      if (elastic.rank() != 0 || step == 1) continue;
      const std::filesystem::path path = dir / ("step_" + std::to_string(step));
      auto save = [&] {
        if (step == 2) throw std::runtime_error("no room left on " + path.string());
        std::ofstream(path) << std::string(1000, 'x');
        return path.string();
      };
      if (step == 2) {
        EXPECT_THROW(recorder.checkpoint(save), std::runtime_error);
        continue;
      }
      EXPECT_EQ(action, step == 3 ? ElasticAction::kCheckpoint : ElasticAction::kContinue);
      const double before = recorder.goodput().checkpoint;
      EXPECT_EQ(recorder.checkpoint(save), path.string());
      if (step == 4) saves_after_3 += recorder.goodput().checkpoint - before;
    }
    recorder.finish();
    const double elastic_checkpoint = elastic.times().checkpoint;  // step 3's window
    if (elastic.rank() == 0) {
      EXPECT_GT(elastic_checkpoint, 0);
      EXPECT_GT(saves_after_3, 0);
      EXPECT_NEAR(recorder.goodput().checkpoint, elastic_checkpoint + saves_after_3, 1e-9);
    } else {
      EXPECT_DOUBLE_EQ(recorder.goodput().checkpoint, elastic_checkpoint);
    }
  });
  const auto records = readRecords(dir / "metrics.jsonl");
  const auto saved = ofType(records, "checkpoint");
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0]["step"], 3);
  EXPECT_EQ(saved[0]["path"], (dir / "step_3").string());
  EXPECT_GE(saved[0]["stall_ms"].get<double>(), 0);
  EXPECT_EQ(saved[1]["step"], 4);
  EXPECT_EQ(saved[1]["path"], (dir / "step_4").string());
  const auto failed = ofType(records, "checkpoint_failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0]["step"], 2);
  EXPECT_EQ(failed[0]["error"], "no room left on " + (dir / "step_2").string());
  EXPECT_EQ(failed[0]["in_a_row"], 1);
  EXPECT_EQ(failed[0]["newest_valid"], "");
  // The goodput record written with each checkpoint, where a launch resumed from it starts.
  const auto goodput = ofType(records, "goodput");
  ASSERT_EQ(goodput.size(), 3u);  // steps 3, 4 and the end
  EXPECT_EQ(goodput[0]["step"], 3);
  // Step 4's has step 3's whole window and step 4's save; nothing saved after it.
  EXPECT_GT(goodput[1]["checkpoint_s"].get<double>(), goodput[0]["checkpoint_s"].get<double>());
  EXPECT_DOUBLE_EQ(goodput[2]["checkpoint_s"].get<double>(),
                   goodput[1]["checkpoint_s"].get<double>());
}

// A notice stops a world of one after step 2: the save, then preempted() ends the launch's
// records (preempted, trained, goodput; no summary) and everything after it is an error.
TEST(RecorderTest, APreemptedLaunchEndsItsRecordsForTheNextToContinue) {
  const std::filesystem::path dir = testing::freshTestDir("recorder");
  struct StopAfterTwo final : StopAgreement {
    std::shared_ptr<StopAgreement> standard;
    explicit StopAfterTwo(std::shared_ptr<StopAgreement> s) : standard(std::move(s)) {}
    StepAction decide(int64_t steps_done) override {
      const StepAction agreed = standard->decide(steps_done);
      return steps_done == 2 ? StepAction::kStop : agreed;
    }
    void waitForAll() override { standard->waitForAll(); }
  };
  ElasticOptions options = quietOptions();
  options.stop = [](std::shared_ptr<StopAgreement> standard) {
    return std::make_shared<StopAfterTwo>(std::move(standard));
  };
  Elastic elastic(nullptr, options);
  elastic.setState({[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "alone"});
  Recorder recorder(elastic, silentInto(dir, 10));
  ASSERT_TRUE(elastic.start(0));
  ElasticAction action = ElasticAction::kContinue;
  while (action == ElasticAction::kContinue) {
    elastic.train([] {});
    recorder.step(StepMetrics{1.5, 4, 0.1, 0});
    action = elastic.boundary();
  }
  ASSERT_EQ(action, ElasticAction::kStop);
  const std::string saved = recorder.checkpoint([&] {
    std::ofstream(dir / "ckpt") << "state";
    return (dir / "ckpt").string();
  });
  elastic.waitForAll();
  recorder.preempted(saved);
  try {
    recorder.step(StepMetrics{});
    ADD_FAILURE() << "a step after preempted() was taken";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "Recorder::step after finish() or preempted()");
  }
  EXPECT_THROW(recorder.finish(), std::logic_error);
  EXPECT_THROW(recorder.checkpoint([] { return std::string("x"); }), std::logic_error);
  const auto records = readRecords(dir / "metrics.jsonl");
  const auto preempted = ofType(records, "preempted");
  ASSERT_EQ(preempted.size(), 1u);
  EXPECT_EQ(preempted[0]["step"], 2);
  EXPECT_EQ(preempted[0]["checkpoint"], saved);
  ASSERT_EQ(ofType(records, "checkpoint").size(), 1u);
  const auto trained = ofType(records, "trained");
  ASSERT_EQ(trained.size(), 1u);
  EXPECT_EQ(trained[0]["steps"], 2);
  const auto goodput = ofType(records, "goodput");
  ASSERT_EQ(goodput.size(), 2u);  // at the checkpoint and at the stop
  EXPECT_EQ(goodput[1]["step"], 2);
  EXPECT_GT(goodput[1]["checkpoint_s"].get<double>(), 0);
  EXPECT_TRUE(ofType(records, "summary").empty());
  EXPECT_EQ(records.back()["type"], "goodput");
}

// A world of one: what a scalar may be called, a value that is not finite, use after finish().
TEST(RecorderTest, BadInputIsAClearErrorOrADocumentedDrop) {
  const std::filesystem::path dir = testing::freshTestDir("recorder");
  Elastic elastic(nullptr, quietOptions());
  elastic.setState({[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "alone"});
  Recorder recorder(elastic, silentInto(dir));
  ASSERT_TRUE(elastic.start(0));
  elastic.train([] {});
  StepMetrics m;
  m.loss = 2;
  m.samples = 4;
  recorder.step(m);
  try {
    recorder.scalar("train/loss", 1);
    ADD_FAILURE() << "a built-in name was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Recorder::scalar: 'train/loss' is a built-in series; name the program's own "
                 "series otherwise (train/, eval/, goodput/ and checkpoint/ are Cumulus's)");
  }
  EXPECT_THROW(recorder.scalar("lr", 1), std::invalid_argument);
  EXPECT_THROW(recorder.scalar("", 1), std::invalid_argument);
  recorder.scalar("tokens", std::numeric_limits<double>::infinity());
  recorder.scalar("tokens", 7);
  EXPECT_EQ(recorder.dropped(), 1);
  StepMetrics negative;
  negative.samples = -1;
  EXPECT_THROW(recorder.step(negative), std::invalid_argument);
  try {
    recorder.balance({4}, {}, 1, "manual");
    ADD_FAILURE() << "a balance record of another reason was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Recorder::balance: reason 'manual' is none of auto, start and reform");
  }
  recorder.finish();
  try {
    recorder.scalar("tokens", 1);
    ADD_FAILURE() << "a scalar after finish() was taken";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "Recorder::scalar after finish() or preempted()");
  }
  EXPECT_THROW(recorder.finish(), std::logic_error);
  const auto records = readRecords(dir / "metrics.jsonl");
  const auto scalars = ofType(records, "scalar");
  ASSERT_EQ(scalars.size(), 2u);
  EXPECT_TRUE(scalars[0]["value"].is_null());  // infinity, written as null
  EXPECT_EQ(scalars[1]["value"], 7);
  const auto summary = ofType(records, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_FALSE(summary[0].contains("test_loss"));  // no evaluation ran
  EXPECT_EQ(ofType(records, "train").at(0)["loss"], 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "tensorboard"));
}

// What cumulus-train tells its recorder, any loop can: its precision, the shares it starts with
// (before the first step), steps it timed itself, saves timed in parts and failures with its
// limit, and the model's totals in the summary.
TEST(RecorderTest, WhatCumulusTrainTellsItsRecorderAnyLoopCanTell) {
  const std::filesystem::path dir = testing::freshTestDir("recorder");
  Elastic elastic(nullptr, quietOptions());
  elastic.setState({[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "alone"});
  std::ostringstream console;
  RecorderOptions ro = silentInto(dir, 2);
  ro.console = &console;
  PrecisionChoice precision;
  precision.requested = Precision::kAuto;
  precision.precision = Precision::kBf16;
  precision.reason = "auto: a test";
  ro.precision = precision;
  Recorder recorder(elastic, ro);
  ASSERT_TRUE(elastic.start(0));
  recorder.balance({8}, {}, 1, "start");
  elastic.train([] {});
  StepMetrics timed;
  timed.loss = 1;
  timed.samples = 8;
  timed.seconds = 0.5;
  timed.comm_wait_seconds = 0.125;
  StepMetrics wrong = timed;
  wrong.comm_wait_seconds = 0.75;
  try {
    recorder.step(wrong);
    ADD_FAILURE() << "a wait longer than its step was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Recorder::step: comm_wait_seconds is more than seconds");
  }
  recorder.step(timed);
  recorder.checkpointFailed(1, "disk full", 3);
  recorder.checkpointFailed(1, "disk still full", 3);
  CheckpointSaved saved;
  saved.step = 1;
  saved.path = (dir / "step-1").string();
  saved.stall_seconds = 0.25;
  saved.encode_seconds = 0.5;
  saved.write_seconds = 0.75;
  saved.bytes = 2'000'000;
  saved.warnings = {"kept 1 checkpoint of 2"};
  const double before = recorder.goodput().checkpoint;
  recorder.checkpointSaved(saved);
  EXPECT_DOUBLE_EQ(recorder.goodput().checkpoint - before, 0.25);
  recorder.checkpointFailed(1, "disk full once more", 0);
  EXPECT_THROW(recorder.checkpointFailed(1, "x", -1), std::invalid_argument);
  saved.stall_seconds = -1;
  EXPECT_THROW(recorder.checkpointSaved(saved), std::invalid_argument);
  elastic.train([] {});
  StepMetrics plain;
  plain.samples = 8;
  recorder.step(plain);
  RunTotals totals;
  totals.parameters = 123;
  totals.parameter_digest = "0123abcd";
  recorder.finish(totals);

  const auto records = readRecords(dir / "metrics.jsonl");
  const auto precision_records = ofType(records, "precision");
  ASSERT_EQ(precision_records.size(), 1u);
  EXPECT_EQ(precision_records[0]["precision"], "bf16");
  EXPECT_EQ(precision_records[0]["requested"], "auto");
  EXPECT_EQ(precision_records[0]["reason"], "auto: a test");
  // The start shares come before the first train record (the dashboard draws them from step 0).
  const auto first_of = [&](const std::string& type) {
    return std::find_if(records.begin(), records.end(),
                        [&](const nlohmann::json& r) { return r.value("type", "") == type; }) -
           records.begin();
  };
  ASSERT_EQ(ofType(records, "balance").size(), 1u);
  EXPECT_EQ(ofType(records, "balance")[0]["reason"], "start");
  EXPECT_EQ(ofType(records, "balance")[0]["step"], 0);
  EXPECT_LT(first_of("balance"), first_of("train"));
  const auto train = ofType(records, "train");
  ASSERT_EQ(train.size(), 2u);
  EXPECT_DOUBLE_EQ(train[0]["step_time_ms"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(train[0]["comm_wait_ms"].get<double>(), 125);
  EXPECT_DOUBLE_EQ(train[0]["compute_ms"].get<double>(), 375);
  const auto checkpoints = ofType(records, "checkpoint");
  ASSERT_EQ(checkpoints.size(), 1u);
  EXPECT_EQ(checkpoints[0]["path"], saved.path);
  EXPECT_DOUBLE_EQ(checkpoints[0]["stall_ms"].get<double>(), 250);
  const auto failed = ofType(records, "checkpoint_failed");
  ASSERT_EQ(failed.size(), 3u);
  EXPECT_EQ(failed[0]["in_a_row"], 1);
  EXPECT_EQ(failed[1]["in_a_row"], 2);
  EXPECT_EQ(failed[1]["newest_valid"], "");
  EXPECT_EQ(failed[2]["in_a_row"], 1);  // the save between ended the run of failures
  EXPECT_EQ(failed[2]["newest_valid"], saved.path);
  const auto summary = ofType(records, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["parameters"], 123);
  const std::string out = console.str();
  EXPECT_NE(out.find("precision: bf16 (auto: a test)"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint step 1: " + saved.path +
                     " (stall 250.00 ms, encode 0.500 s, write 0.750 s, 2.0 MB)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("warning: kept 1 checkpoint of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("(2 in a row; the run stops at 3): disk still full"), std::string::npos)
      << out;
  EXPECT_NE(out.find("final parameters sha256 0123abcd"), std::string::npos) << out;
}

}  // namespace
}  // namespace cumulus
