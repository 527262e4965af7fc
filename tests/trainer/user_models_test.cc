// Users' own TorchScript models, losses and .npy data, trained from YAML alone by cumulus-train
// and cumulus-run as a user runs them. The models and data are made at test time by
// make_user_fixtures.py with the project environment's Python (torch.jit.script, numpy.save). Final
// parameters are compared through the "final parameters sha256" line rank 0 prints; resumes stop a
// worker with cumulus-train-faults, as in resume_process_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumulus/sampler.h"
#include "data/npy.h"
#include "tests/test_dir.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"
#include "trainer/resume.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::Args;
using cumulus::testing::digestOf;
using cumulus::testing::Env;
using cumulus::testing::lastAfter;
using cumulus::testing::ProcessResult;
using cumulus::testing::runProcess;
using cumulus::testing::withFaults;

using cumulus::testing::kTrain;
const std::string kPython = CUMULUS_PYTHON;

// A worker started by hand (the test itself may run under a launcher).
const Env kAlone = cumulus::testing::aloneEnv();

std::vector<nlohmann::json> records(const fs::path& metrics, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] == type) out.push_back(record);
  }
  return out;
}

class UserModelsTest : public ::testing::Test {
 protected:
  // The fixtures, once for the suite (a couple of seconds of Python).
  static void SetUpTestSuite() {
    fixtures_ = new fs::path(fs::path(::testing::TempDir()) /
                             ("user_fixtures_" + std::to_string(::getpid())));
    fs::remove_all(*fixtures_);
    const std::string make = kPython +
                             " " CUMULUS_SOURCE_DIR "/tests/trainer/make_user_fixtures.py " +
                             fixtures_->string() + " 2>&1";
    made_ = std::system(make.c_str()) == 0;
    if (!made_) ADD_FAILURE() << "make_user_fixtures.py failed: " << make;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*fixtures_);
    delete fixtures_;
  }

  void SetUp() override {
    if (!made_) GTEST_FAIL() << "make_user_fixtures.py failed: the fixtures are missing";
    dir_ = cumulus::testing::freshTestDir("user_models");
    // A user's regression: 13 features -> 1 value, 512 training samples, 16 steps an epoch.
    std::ofstream(dir_ / "regression.yaml")
        << "name: regression\n"
        << "model: {name: torchscript:" << fixture("linear.pt") << "}\n"
        << "data: {format: npy, train: " << fixture("regression/train")
        << ", test: " << fixture("regression/test") << "}\n"
        << "loss: {name: mse}\n"
        << "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
        << "trainer: {global_batch_size: 32, epochs: 2, threads: 1, log_every_steps: 4}\n";
    // A user's byte-level language model: windows of 16 + 1 tokens, 18 steps an epoch.
    std::ofstream(dir_ / "lm.yaml")
        << "name: lm\n"
        << "model: {name: torchscript:" << fixture("tiny_lm.pt") << "}\n"
        << "data: {format: tokens, train: " << fixture("text_train.npy")
        << ", test: " << fixture("text_val.npy") << ", seq_len: 16}\n"
        << "loss: {name: cross_entropy}\n"
        << "optimizer: {name: adamw, lr: 0.02}\n"
        << "trainer: {global_batch_size: 32, epochs: 3, threads: 1, log_every_steps: 6}\n";
  }
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  static std::string fixture(const std::string& name) { return (*fixtures_ / name).string(); }

  // cumulus-train CONFIG with its own run directory and `extra` arguments.
  Args train(const std::string& config, const std::string& run, Args extra = {}) const {
    Args argv = {kTrain, (dir_ / config).string(), "--set",
                 "trainer.run_dir=" + (dir_ / run).string()};
    for (auto& e : extra) argv.push_back(std::move(e));
    return argv;
  }
  // Two workers under cumulus-run, which restarts (these tests stop one rank and resume).
  Args group(Args train_argv) const {
    return cumulus::testing::groupOf(2, (dir_ / "logs").string(), std::move(train_argv),
                                     {"--recovery=restart"});
  }
  // The worker command run by cumulus-train-faults, raising SIGTERM at rank 1 after `step`.
  static Args stoppedAt(const std::string& step, const Args& train_argv) {
    return withFaults({"--fault-sigterm-at-step", step + ":1"}, train_argv);
  }

  // 2 workers to the end; then 2 workers stopped after step `stop` and resumed by 2 more: the
  // resumed run must end bit-identical to the uninterrupted one. Returns the uninterrupted run.
  ProcessResult trainStopAndResume(const std::string& config, int stop) {
    const ProcessResult whole = runProcess(group(train(config, "whole")));
    const std::string expected = digestOf(whole);
    const ProcessResult first =
        runProcess(group(stoppedAt(std::to_string(stop), train(config, "x"))));
    EXPECT_EQ(first.exit_code, 75) << first.output;
    EXPECT_NE(first.output.find("preempted at step " + std::to_string(stop)), std::string::npos)
        << first.output;
    const ProcessResult second = runProcess(group(train(config, "x")));
    EXPECT_NE(second.output.find(" at step " + std::to_string(stop)), std::string::npos)
        << second.output;
    EXPECT_EQ(digestOf(second), expected) << "resumed after step " << stop;
    return whole;
  }

  // cumulus-train alone, expected to refuse to start: its one error line.
  std::string setupError(const std::string& config, Args sets) const {
    const ProcessResult r = runProcess(train(config, "bad", std::move(sets)), kAlone);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    return lastAfter(r.output, "cumulus-train: error: ");
  }

  static inline fs::path* fixtures_ = nullptr;
  static inline bool made_ = false;
  fs::path dir_;
};

TEST_F(UserModelsTest, RegressionOnNpyLearnsWithMseOnTwoWorkersAndResumesBitIdentical) {
  const ProcessResult whole = trainStopAndResume("regression.yaml", 9);
  // The targets are a linear function of the inputs plus 1% noise: the fit takes most of the
  // initial error away.
  const auto train_records = records(dir_ / "whole" / "metrics.jsonl", "train");
  ASSERT_GE(train_records.size(), 2u);
  const double first = train_records.front()["loss"], last = train_records.back()["loss"];
  EXPECT_LT(last, 0.2 * first) << "first " << first << ", last " << last;
  const auto summary = records(dir_ / "whole" / "metrics.jsonl", "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_LT(summary[0]["test_loss"].get<double>(), 0.2 * first);
  // mse has no accuracy: none is printed or recorded.
  EXPECT_FALSE(summary[0].contains("test_accuracy")) << summary[0];
  EXPECT_EQ(whole.output.find("accuracy"), std::string::npos) << whole.output;
  EXPECT_NE(whole.output.find("test loss "), std::string::npos) << whole.output;
}

TEST_F(UserModelsTest, ByteLanguageModelLearnsWithCrossEntropyAndReportsTokenAccuracy) {
  const ProcessResult whole = trainStopAndResume("lm.yaml", 20);
  const auto evals = records(dir_ / "whole" / "metrics.jsonl", "eval");
  ASSERT_EQ(evals.size(), 3u);  // one an epoch
  // Nats per token: ln 256 = 5.55 for a uniform guess; a bigram model of these sentences
  // gets well under 2.
  EXPECT_LT(evals.back()["test_loss"].get<double>(), 2.0) << evals.back();
  EXPECT_LT(evals.back()["test_loss"].get<double>(), evals.front()["test_loss"].get<double>());
  const double accuracy = evals.back()["test_accuracy"];
  EXPECT_GT(accuracy, 0.3);
  EXPECT_LE(accuracy, 1.0);
  EXPECT_NE(whole.output.find("test_accuracy "), std::string::npos) << whole.output;
  EXPECT_NE(whole.output.find("test accuracy "), std::string::npos) << whole.output;
}

// 2 workers stopped mid-epoch, resumed by 1, on a token stream: windows are re-sharded as IDX
// samples are, so the steps that made the final model consumed every window of every epoch's
// global batches exactly once.
TEST_F(UserModelsTest, TokenWindowsReshardFromTwoWorkersToOne) {
  const std::string ledger = (dir_ / "ledger").string();
  const ProcessResult first = runProcess(group(withFaults(
      {"--fault-sigterm-at-step", "7:1", "--sample-ledger", ledger}, train("lm.yaml", "x"))));
  ASSERT_EQ(first.exit_code, 75) << first.output;
  const ProcessResult second = runProcess(
      withFaults({"--sample-ledger", ledger}, train("lm.yaml", "x", {"--resume", "auto"})), kAlone);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("world size 2 -> 1: re-sharding each global batch of 32"),
            std::string::npos)
      << second.output;

  SampleLedger book;
  for (const char* suffix : {".rank0", ".rank1"}) book.readFile(ledger + suffix);
  book.dropReplayedSteps();
  EXPECT_EQ(book.epochs(), (std::set<int64_t>{0, 1, 2}));
  // Each epoch's windows: its full global batches of the (seed 0, epoch) permutation.
  const auto windows = data::TokenExamples::open(fixture("text_train.npy"), 16);
  cumulus::DistributedSampler sampler(windows->size(), 32, /*seed=*/0, /*shuffle=*/true,
                                      /*drop_last=*/true);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> expected;
    for (int64_t k = 0; k < sampler.stepsPerEpoch(); ++k, sampler.advance()) {
      for (const int64_t i : sampler.globalBatch()) expected.insert(i);
    }
    ASSERT_EQ(expected.size(), 18u * 32) << "epoch " << epoch;
    const auto problems = book.checkEpoch(epoch, expected);
    EXPECT_TRUE(problems.empty()) << problems.size() << " problems, first: " << problems[0];
  }
}

// loss.name module: the module's forward(x, y) returns its mean squared error. It starts from the
// parameters linear.pt starts from, so it must train as mse does, up to float rounding (the
// module sums its mean times the batch; mse sums per-sample means).
TEST_F(UserModelsTest, ModuleLossTrainsAsTheBuiltInLossWould) {
  const ProcessResult mse = runProcess(train("regression.yaml", "mse"), kAlone);
  ASSERT_EQ(mse.exit_code, 0) << mse.output;
  const ProcessResult module =
      runProcess(train("regression.yaml", "module",
                       {"--set", "model.name=torchscript:" + fixture("linear_loss.pt"), "--set",
                        "loss.name=module"}),
                 kAlone);
  ASSERT_EQ(module.exit_code, 0) << module.output;
  const auto a = records(dir_ / "mse" / "metrics.jsonl", "eval");
  const auto b = records(dir_ / "module" / "metrics.jsonl", "eval");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i]["test_loss"], y = b[i]["test_loss"];
    EXPECT_NEAR(x, y, 1e-5 * x) << "evaluation " << i;
    EXPECT_FALSE(b[i].contains("test_accuracy")) << b[i];
  }
  EXPECT_EQ(module.output.find("accuracy"), std::string::npos) << module.output;
}

TEST_F(UserModelsTest, BadInputFailsBeforeTrainingNamingTheFileAndTheReason) {
  const std::string linear = "torchscript:" + fixture("wrong_width.pt");
  EXPECT_EQ(
      setupError("regression.yaml", {"--set", "model.name=" + linear}),
      "model " + linear + " failed on one sample of " + fixture("regression/train") +
          " (inputs float32 [1, 13]): torchscript model " + fixture("wrong_width.pt") +
          ": forward failed: RuntimeError: addmm: mat1 and mat2 shapes cannot be multiplied (1x13 "
          "and 12x1)");
  // A model that runs in fp32 but not under bf16 autocast: LibTorch's error names the
  // operation, and the run says that the precision is why.
  const std::string float32_only = "torchscript:" + fixture("float32_only.pt");
  const std::string bf16 = setupError("regression.yaml", {"--set", "model.name=" + float32_only,
                                                          "--set", "trainer.precision=bf16"});
  EXPECT_EQ(bf16.rfind("model " + float32_only + " failed on one sample of " +
                           fixture("regression/train") + " (inputs float32 [1, 13]): ",
                       0),
            0u)
      << bf16;
  EXPECT_NE(bf16.find("index_add_(): self (BFloat16) and source (Float) must have the same scalar "
                      "type; the model runs in fp32, so that operation fails under LibTorch's bf16 "
                      "autocast: set trainer.precision: fp32, or make the model accept bfloat16 "
                      "there"),
            std::string::npos)
      << bf16;
  const std::string vector = "torchscript:" + fixture("vector_loss.pt");
  EXPECT_EQ(
      setupError("regression.yaml", {"--set", "model.name=" + vector, "--set", "loss.name=module"}),
      "model " + vector + " failed on one sample of " + fixture("regression/train") +
          " (inputs float32 [1, 13]): torchscript model " + fixture("vector_loss.pt") +
          ": forward(inputs, targets) returned a tensor of shape [1], not a scalar; with "
          "loss.name module it must return the mean loss over the batch");
  EXPECT_EQ(setupError("regression.yaml", {"--set", "data.train=" + fixture("flat_targets")}),
            "loss.name mse: outputs [1, 1] and targets [1] do not match; mse wants outputs and "
            "targets of one shape [B, ...] (model torchscript:" +
                fixture("linear.pt") + ", one sample of " + fixture("flat_targets") + ")");
  EXPECT_EQ(setupError("regression.yaml", {"--set", "data.test=" + fixture("bad_rows")}),
            "data.test: " + fixture("bad_rows") +
                ": inputs.npy has 10 rows but targets.npy has 9; sample i is row i of both, so "
                "their first dimensions must agree");
  EXPECT_EQ(setupError("regression.yaml", {"--set", "data.format=tokens"}),
            "data.train: " + fixture("regression/train") + ": is a directory, not a regular file");
}

// A model that loops forever in forward (in training mode: the start-up dry run passes) would hang
// the job forever: the step watchdog ends the worker with exit 2, naming the rank, the step and
// the phase. The watchdog's own thread prints the line: the stuck thread never returns.
TEST_F(UserModelsTest, AModelThatHangsInForwardIsStoppedByTheStepWatchdog) {
  const ProcessResult r =
      runProcess(train("regression.yaml", "hang",
                       {"--set", "model.name=torchscript:" + fixture("hangs_in_training.pt"),
                        "--set", "trainer.step_timeout_seconds=2"}),
                 kAlone, {}, /*timeout_s=*/60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lastAfter(r.output, "cumulus-train: error: "),
            "rank 0: step 1 made no progress in forward for 2 s (trainer.step_timeout_seconds); "
            "a step that hangs hangs again when retried, so the job stops: look for an endless "
            "loop or a blocking call in forward, or raise trainer.step_timeout_seconds");
  EXPECT_EQ(r.output.find("first step"), std::string::npos) << r.output;
}

TEST_F(UserModelsTest, AStateDictOrAModelWithNothingToTrainIsRefusedSayingWhatToDo) {
  for (const char* saved : {"state_dict.pt", "state_dict_legacy.pt"}) {
    EXPECT_EQ(setupError("regression.yaml", {"--set", "model.name=torchscript:" + fixture(saved)}),
              "cannot load TorchScript model " + fixture(saved) +
                  ": it looks like a torch.save file (a state dict or a pickled model), not a "
                  "TorchScript module; in Python, export the model with torch.jit.script(model) "
                  "or torch.jit.trace(model, example_inputs), then call .save(path) on the result");
  }
  const std::string none = "torchscript:" + fixture("no_parameters.pt");
  EXPECT_EQ(setupError("regression.yaml", {"--set", "model.name=" + none}),
            "model " + none +
                " has no trainable parameters (it has none): there is nothing to train; give the "
                "module at least one torch.nn.Parameter that requires a gradient");
}

TEST_F(UserModelsTest, AnEmptyTrainingSetIsRefusedNamingItsFiles) {
  EXPECT_EQ(setupError("regression.yaml", {"--set", "data.train=" + fixture("empty")}),
            "data.train: " + fixture("empty") +
                " (npy: inputs float32 [0, 13], targets float32 [0, 1]) holds no samples; "
                "training needs at least one");
}

// docs/data.md: the run prints what it read after the model line (with " (stored as float64)"
// where a file stores another width: npy_examples_test.cc).
TEST_F(UserModelsTest, TheRunPrintsWhatItRead) {
  const ProcessResult r =
      runProcess(train("regression.yaml", "run", {"--set", "trainer.max_steps=1"}), kAlone);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("\ntrain data: " + fixture("regression/train") +
                    " (npy: inputs float32 [512, 13], targets float32 [512, 1])\ntest data: " +
                    fixture("regression/test") +
                    " (npy: inputs float32 [128, 13], targets float32 [128, 1])\n"),
      std::string::npos)
      << r.output;
}

TEST_F(UserModelsTest, TokenIdsTheModelCannotTakeAndShortStreamsFailBeforeTraining) {
  EXPECT_EQ(setupError("lm.yaml", {"--set", "model.name=torchscript:" + fixture("small_vocab.pt"),
                                   "--set", "data.train=" + fixture("wide.npy")}),
            "token id 250 in " + fixture("wide.npy") +
                " is out of range for the model's embedding: torchscript model " +
                fixture("small_vocab.pt") +
                ": forward failed: RuntimeError: index out of range "
                "in self");
  EXPECT_EQ(setupError("lm.yaml", {"--set", "model.name=torchscript:" + fixture("narrow_lm.pt"),
                                   "--set", "data.test=" + fixture("wide.npy")}),
            "token id 250 in " + fixture("wide.npy") +
                " is beyond the model's outputs: logits float32 [1, 16, 200] score ids 0 to 199");
  EXPECT_EQ(setupError("lm.yaml", {"--set", "data.test=" + fixture("short.npy")}),
            "data.test: seq_len 16 is longer than the token stream " + fixture("short.npy") +
                " (10 tokens); one sample needs seq_len + 1 tokens");
  EXPECT_EQ(setupError("lm.yaml", {"--set", "loss.name=mse"}),
            "loss.name mse: outputs [1, 16, 256] and targets [1, 16] do not match; mse wants "
            "outputs and targets of one shape [B, ...] (model torchscript:" +
                fixture("tiny_lm.pt") + ", one sample of " + fixture("text_train.npy") + ")");
  EXPECT_EQ(setupError("lm.yaml", {"--set", "model.name=mlp"}),
            "model mlp failed on one sample of " + fixture("text_train.npy") +
                " (inputs int64 [1, 16]): mat1 and mat2 must have the same dtype, but got Long and "
                "Float");
}

}  // namespace
}  // namespace cumulus::trainer
