// End-to-end runs of the training loop on small synthetic data (a few seconds each).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/testing.h"
#include "comm/memory_store.h"
#include "cumulus/data_parallel.h"
#include "cumulus/process_group.h"
#include "models/model.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/test_support.h"
#include "tests/trainer/fault_parts.h"
#include "trainer/state_dict.h"
#include "trainer/trainer.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;

// 512 training samples, global batch 64: 8 steps per epoch.
configs::Experiment smallExperiment(const std::string& run_dir) {
  configs::Experiment e;
  e.name = "training_test";
  e.model.name = "mlp";
  e.model.hidden = {32};
  e.data.dataset = configs::Dataset::kSynthetic;
  e.data.synthetic_train_samples = 512;
  e.data.synthetic_test_samples = 256;
  e.optimizer.name = configs::OptimizerName::kSgd;
  e.optimizer.lr = 0.05;
  e.optimizer.momentum = 0.9;
  e.trainer.global_batch_size = 64;
  e.trainer.epochs = 2;
  e.trainer.seed = 11;
  e.trainer.threads = 1;
  e.trainer.run_dir = run_dir;
  e.trainer.log_every_steps = 4;
  return e;
}

using cumulus::testing::TempDir;

// FNV-1a over the bytes of every parameter, in registration order.
uint64_t parameterHash(models::Model& model) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& [name, tensor] : model.namedParameters()) {
    const auto t = tensor.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return h;
}

double maxAbsDifference(models::Model& a, models::Model& b) {
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  }
  return worst;
}

std::vector<std::string> readLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

RunResult runQuietly(const configs::Experiment& e, bool write_outputs = false,
                     models::Model** model_out = nullptr,
                     std::unique_ptr<Trainer>* keep = nullptr) {
  TrainerOptions options;
  options.write_outputs = write_outputs;
  auto trainer = std::make_unique<Trainer>(e, RunEnv{}, options);
  RunResult result = trainer->run();
  if (model_out != nullptr) *model_out = &trainer->model();
  if (keep != nullptr) *keep = std::move(trainer);
  return result;
}

TEST(TrainingTest, LossFallsAndTheRunIsBitIdenticalWhenRepeated) {
  auto e = smallExperiment("");
  e.model.dropout = 0.2;  // the per-step generator seeding must make dropout repeatable too
  e.trainer.epochs = 3;   // 24 steps

  std::unique_ptr<Trainer> first, second;
  models::Model* model = nullptr;
  const RunResult a = runQuietly(e, false, &model, &first);
  const uint64_t hash_a = parameterHash(*model);
  const RunResult b = runQuietly(e, false, &model, &second);
  const uint64_t hash_b = parameterHash(*model);

  ASSERT_EQ(a.step_losses.size(), 24u);
  // ln(10) = 2.30 at the start; the synthetic classes separate quickly.
  EXPECT_GT(a.step_losses.front(), 2.0);
  const double last = (a.step_losses[21] + a.step_losses[22] + a.step_losses[23]) / 3;
  EXPECT_LT(last, 0.5 * a.step_losses.front()) << "first " << a.step_losses.front();
  ASSERT_TRUE(a.test_accuracy.has_value());
  EXPECT_GT(*a.test_accuracy, 0.8);

  EXPECT_EQ(hash_a, hash_b);
  EXPECT_EQ(a.step_losses, b.step_losses);
  EXPECT_EQ(a.test_loss, b.test_loss);

  // And the hash does see the parameters: another seed gives another model.
  e.trainer.seed = 12;
  std::unique_ptr<Trainer> third;
  runQuietly(e, false, &model, &third);
  EXPECT_NE(parameterHash(*model), hash_a);
}

// Dropout masks come from (seed, epoch, step, rank), not from whatever the generator did before:
// draws from torch's default generator between set-up and training change nothing. (A resumed
// run relies on this: it cannot replay the generator's history.)
TEST(TrainingTest, DropoutDependsOnlyOnThePositionInTraining) {
  auto e = smallExperiment("");
  e.model.dropout = 0.3;
  std::unique_ptr<Trainer> plain;
  models::Model* model = nullptr;
  runQuietly(e, false, &model, &plain);
  const uint64_t expected = parameterHash(*model);

  TrainerOptions quiet;
  quiet.write_outputs = false;
  Trainer disturbed(e, RunEnv{}, quiet);
  torch::rand({1000});
  disturbed.run();
  EXPECT_EQ(parameterHash(disturbed.model()), expected);
}

// k = 3 micro-batches per step must give the parameters of k = 1 with the same global batch:
// the loss of each micro-batch is divided by the global batch size, so the gradients add up to
// the same mean. 100 samples in batches of 32 without drop_last make uneven micro-batches
// (10/11/11) and a short last batch of 4 (1/1/2), which a per-micro-batch mean would get wrong.
// The two differ only by float32 summation order; 1e-6 absolute after 16 steps.
TEST(TrainingTest, GradientAccumulationMatchesOneLargeBatch) {
  auto e = smallExperiment("");
  e.data.synthetic_train_samples = 100;
  e.data.drop_last = false;
  e.trainer.global_batch_size = 32;
  e.trainer.epochs = 4;  // 4 steps per epoch
  std::unique_ptr<Trainer> one, three;
  models::Model *m1 = nullptr, *m3 = nullptr;
  const RunResult r1 = runQuietly(e, false, &m1, &one);
  e.trainer.grad_accumulation = 3;
  const RunResult r3 = runQuietly(e, false, &m3, &three);
  ASSERT_EQ(r1.steps, 16);
  ASSERT_EQ(r3.steps, 16);
  EXPECT_LT(maxAbsDifference(*m1, *m3), 1e-6);
  EXPECT_NEAR(r1.step_losses.back(), r3.step_losses.back(), 1e-6);
  // Not vacuous: the parameters moved from their initial values.
  auto fresh = smallExperiment("");
  fresh.trainer.max_steps = 1;
  fresh.optimizer.lr = 1e-12;
  std::unique_ptr<Trainer> untrained;
  models::Model* m0 = nullptr;
  runQuietly(fresh, false, &m0, &untrained);
  EXPECT_GT(maxAbsDifference(*m0, *m1), 1e-2);
}

// One plain SGD step at lr 1 moves the parameters by exactly the clipped gradient, whose global
// norm is the clip threshold when the raw gradient is longer (it is: about 1 at initialization).
TEST(TrainingTest, GradientClippingBoundsTheUpdateByTheGlobalNorm) {
  auto e = smallExperiment("");
  e.optimizer.momentum = 0;
  e.optimizer.lr = 1;
  e.trainer.max_steps = 1;
  e.trainer.grad_clip_norm = 0.01;
  TrainerOptions quiet;
  quiet.write_outputs = false;
  Trainer trainer(e, RunEnv{}, quiet);
  std::vector<torch::Tensor> before;
  for (const auto& p : trainer.model().parameters()) before.push_back(p.detach().clone());
  trainer.run();
  double squares = 0;
  const auto after = trainer.model().parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    squares += (after[i] - before[i]).to(torch::kDouble).pow(2).sum().item<double>();
  }
  EXPECT_NEAR(std::sqrt(squares), 0.01, 1e-6);
}

// Two ranks of a world of 2, as threads, joined by a GradientSync that sums their gradients in
// a fixed order: what the all-reduce does over sockets. The result must equal the
// single-process run, which shows the loss normalization and the seam are right.
class PairSum {
 public:
  void exchange(int rank, const std::vector<torch::Tensor>& grads) {
    std::unique_lock<std::mutex> lock(mutex_);
    grads_[rank] = grads;
    const int64_t round = round_;
    if (++arrived_ == 2) {
      for (size_t i = 0; i < grads_[0].size(); ++i) sums_.push_back(grads_[0][i] + grads_[1][i]);
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    for (size_t i = 0; i < grads.size(); ++i) grads[i].copy_(sums_[i]);
    if (++copied_ == 2) {
      copied_ = 0;
      sums_.clear();
      ++copy_round_;
      cv_.notify_all();
    } else {
      const int64_t copy_round = copy_round_;
      cv_.wait(lock, [&] { return copy_round_ != copy_round; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<torch::Tensor> grads_[2];
  std::vector<torch::Tensor> sums_;
  int arrived_ = 0, copied_ = 0;
  int64_t round_ = 0, copy_round_ = 0;
};

class PairSync final : public GradientSync {
 public:
  PairSync(PairSum& sum, int rank, std::vector<std::string>& calls)
      : sum_(sum), rank_(rank), calls_(calls) {}
  void attach(const std::vector<torch::Tensor>& params) override {
    params_ = params;
    calls_.push_back("attach");
  }
  void beforeBackward(bool last) override { calls_.push_back(last ? "before:last" : "before"); }
  void afterBackward(bool last) override { calls_.push_back(last ? "after:last" : "after"); }
  void finish() override {
    calls_.push_back("finish");
    std::vector<torch::Tensor> grads;
    for (const auto& p : params_) grads.push_back(p.grad());
    sum_.exchange(rank_, grads);
  }

 private:
  PairSum& sum_;
  int rank_;
  std::vector<std::string>& calls_;
  std::vector<torch::Tensor> params_;
};

TEST(TrainingTest, TwoRanksSummingGradientsMatchOneProcess) {
  auto e = smallExperiment("");
  e.data.synthetic_train_samples = 100;
  e.data.drop_last = false;  // a last batch of 4: 2 samples per rank
  e.trainer.global_batch_size = 32;
  e.trainer.epochs = 3;
  e.trainer.grad_accumulation = 2;
  std::unique_ptr<Trainer> single;
  models::Model* reference = nullptr;
  runQuietly(e, false, &reference, &single);

  PairSum sum;
  std::vector<std::string> calls[2];
  std::unique_ptr<Trainer> ranks[2];
  for (int r = 0; r < 2; ++r) {
    RunEnv env;
    env.rank = r;
    env.world_size = 2;
    TrainerOptions options;
    options.write_outputs = false;
    ranks[r] =
        std::make_unique<Trainer>(e, env, std::make_unique<PairSync>(sum, r, calls[r]), options);
  }
  std::thread other([&] { ranks[1]->run(); });
  ranks[0]->run();
  other.join();

  EXPECT_LT(maxAbsDifference(*reference, ranks[0]->model()), 1e-6);
  EXPECT_EQ(parameterHash(ranks[0]->model()), parameterHash(ranks[1]->model()));
  // The seam's call order: attach once, then per step k (before, after) pairs and finish.
  const std::vector<std::string> step = {"before", "after", "before:last", "after:last", "finish"};
  ASSERT_EQ(calls[0].size(), 1 + 12 * step.size());
  EXPECT_EQ(calls[0][0], "attach");
  for (size_t i = 0; i < step.size(); ++i) EXPECT_EQ(calls[0][1 + i], step[i]);
  EXPECT_EQ(calls[0], calls[1]);
}

// Counts the samples of this rank's share at each step.
class ShareSizes final : public ForwardingBatchSource {
 public:
  ShareSizes(std::shared_ptr<BatchSource> inner, std::vector<int64_t>& sizes)
      : ForwardingBatchSource(std::move(inner)), sizes_(sizes) {}
  StepBatch next(int64_t step, int64_t micro_batches) override {
    StepBatch batch = inner_->next(step, micro_batches);
    sizes_.push_back(static_cast<int64_t>(batch.indices.size()));
    return batch;
  }

 private:
  std::vector<int64_t>& sizes_;
};

// Unequal shares of each global batch (trainer.balance: fixed) give the gradient of the same
// global mean: the same model as one process and as equal shares, up to the order of summation.
TEST(TrainingTest, TwoRanksWithUnequalSharesMatchOneProcess) {
  auto e = smallExperiment("");
  e.data.synthetic_train_samples = 100;
  e.data.drop_last = false;  // a last batch of 4: floor(4·24/32) = 3 samples on rank 0, 1 on rank 1
  e.trainer.global_batch_size = 32;
  e.trainer.epochs = 3;
  e.trainer.grad_accumulation = 2;
  std::unique_ptr<Trainer> single;
  models::Model* reference = nullptr;
  runQuietly(e, false, &reference, &single);

  auto runPair = [&](const configs::Experiment& experiment, std::vector<int64_t>(&sizes)[2],
                     std::unique_ptr<Trainer>(&ranks)[2]) {
    PairSum sum;
    std::vector<std::string> calls[2];
    for (int r = 0; r < 2; ++r) {
      RunEnv env;
      env.rank = r;
      env.world_size = 2;
      TrainerOptions options;
      options.write_outputs = false;
      options.batches = [&sizes, r](std::shared_ptr<BatchSource> standard) {
        return std::make_shared<ShareSizes>(std::move(standard), sizes[r]);
      };
      ranks[r] = std::make_unique<Trainer>(experiment, env,
                                           std::make_unique<PairSync>(sum, r, calls[r]), options);
    }
    std::thread other([&] { ranks[1]->run(); });
    ranks[0]->run();
    other.join();
  };
  std::vector<int64_t> equal_sizes[2];
  std::unique_ptr<Trainer> equal[2];
  runPair(e, equal_sizes, equal);
  e.trainer.balance = configs::BalanceMode::kFixed;
  e.trainer.balance_shares = {24, 8};
  std::vector<int64_t> sizes[2];
  std::unique_ptr<Trainer> ranks[2];
  runPair(e, sizes, ranks);

  const std::vector<int64_t> epoch0 = {24, 24, 24, 3}, epoch1 = {8, 8, 8, 1};
  ASSERT_EQ(sizes[0].size(), 12u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(sizes[0][i], epoch0[i]) << i;
    EXPECT_EQ(sizes[1][i], epoch1[i]) << i;
  }
  EXPECT_EQ(equal_sizes[0][0], 16);
  EXPECT_LT(maxAbsDifference(*reference, ranks[0]->model()), 1e-6);
  EXPECT_LT(maxAbsDifference(equal[0]->model(), ranks[0]->model()), 1e-6);
  EXPECT_EQ(parameterHash(ranks[0]->model()), parameterHash(ranks[1]->model()));
}

TEST(TrainingTest, FixedSharesThatDoNotFitAreASetupErrorNamingTheKey) {
  auto e = smallExperiment("");
  e.trainer.balance = configs::BalanceMode::kFixed;
  e.trainer.balance_shares = {40, 20};
  RunEnv env;
  env.rank = 0;
  env.world_size = 2;
  PairSum sum;
  std::vector<std::string> calls;
  TrainerOptions options;
  options.write_outputs = false;
  try {
    Trainer t(e, env, std::make_unique<PairSync>(sum, 0, calls), options);
    FAIL() << "shares summing to 60 of 64 were accepted";
  } catch (const SetupError& error) {
    EXPECT_STREQ(error.what(),
                 "trainer.balance_shares: sampler: the shares sum to 60, not to the global batch "
                 "size 64");
  }
  e.trainer.balance_shares = {64};
  try {
    Trainer t(e, env, std::make_unique<PairSync>(sum, 0, calls), options);
    FAIL() << "one share for two workers was accepted";
  } catch (const SetupError& error) {
    EXPECT_STREQ(error.what(),
                 "trainer.balance_shares: 1 shares for 2 workers; give one sample count per "
                 "worker, or set trainer.balance: auto or off");
  }
}

TEST(TrainingTest, WritesConfigMetricsAndAStateDictPythonCanRead) {
  TempDir dir;
  auto e = smallExperiment(dir.path());
  e.eval.every_steps = 5;  // 16 steps: evaluations at 5, 10, 15 and the end
  std::ostringstream console;
  TrainerOptions options;
  options.console = &console;
  Trainer trainer(e, RunEnv{}, options);
  const RunResult result = trainer.run();

  EXPECT_TRUE(fs::exists(dir.path() + "/config.yaml"));
  const auto lines = readLines(dir.path() + "/metrics.jsonl");
  int train = 0, eval = 0, summary = 0;
  for (const auto& line : lines) {
    train += line.rfind("{\"type\":\"train\",", 0) == 0;
    eval += line.rfind("{\"type\":\"eval\",", 0) == 0;
    summary += line.rfind("{\"type\":\"summary\",", 0) == 0;
  }
  EXPECT_EQ(train, 5);  // steps 1, 4, 8, 12, 16
  EXPECT_EQ(eval, 4);
  EXPECT_EQ(summary, 1);
  const auto summary_record = nlohmann::json::parse(lines.back());
  EXPECT_EQ(summary_record["type"], "summary") << lines.back();
  EXPECT_EQ(summary_record["steps"], 16) << lines.back();
  EXPECT_EQ(summary_record["epochs"], 2.0) << lines.back();
  ASSERT_GE(lines.size(), 3u);
  // What the run trains in, and why, comes first.
  EXPECT_EQ(lines[0].rfind("{\"type\":\"precision\",\"precision\":\"fp32\",\"requested\":\"fp32\","
                           "\"reason\":\"as asked\",\"time\":",
                           0),
            0u)
      << lines[0];
  EXPECT_EQ(lines[1].rfind("{\"type\":\"first_step\",\"step\":1,\"time\":", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("{\"type\":\"train\",\"step\":1,\"epoch\":1,\"loss\":", 0), 0u)
      << lines[2];
  // The loop's own record and the launch's goodput, just before the summary.
  EXPECT_EQ(lines[lines.size() - 3].rfind(
                "{\"type\":\"trained\",\"step\":16,\"steps\":16,\"seconds\":", 0),
            0u)
      << lines[lines.size() - 3];
  const auto goodput = nlohmann::json::parse(lines[lines.size() - 2]);
  EXPECT_EQ(goodput["type"], "goodput");
  EXPECT_EQ(goodput["step"], 16);
  double parts = 0;
  for (const char* key : {"startup_s", "training_s", "comm_wait_s", "evaluation_s", "checkpoint_s",
                          "reform_s", "restart_s", "redone_s", "other_s"}) {
    EXPECT_GE(goodput[key].get<double>(), 0.0) << key;
    parts += goodput[key].get<double>();
  }
  // The categories split the wall time (other_s is the rest).
  EXPECT_NEAR(parts, goodput["wall_s"].get<double>(), 1e-9);
  EXPECT_GT(goodput["training_s"].get<double>(), 0.0);
  EXPECT_GT(goodput["evaluation_s"].get<double>(), 0.0);
  EXPECT_GT(goodput["productive_ratio"].get<double>(), 0.0);
  EXPECT_LE(goodput["productive_ratio"].get<double>(), 1.0);

  char final_line[160];
  std::snprintf(final_line, sizeof(final_line),
                "test accuracy %.4f (loss %.4f) after 2 epochs, 16 steps, ",
                result.test_accuracy.value(), result.test_loss);
  EXPECT_NE(console.str().find(final_line), std::string::npos) << console.str();
  EXPECT_EQ(console.str().rfind("model: ", 0), 0u) << console.str();

  // Our own reader gets the parameters back exactly.
  const std::string path = dir.path() + "/model_state_dict.pt";
  const checkpoint::NamedTensors saved = loadStateDict(path);
  const auto params = trainer.model().namedParameters();
  ASSERT_EQ(saved.size(), params.size() + trainer.model().namedBuffers().size());
  double our_sum = 0;
  std::string our_keys;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(saved[i].first, params[i].first);
    EXPECT_TRUE(torch::equal(saved[i].second, params[i].second)) << params[i].first;
  }
  std::vector<std::string> names;
  for (const auto& [name, tensor] : saved) {
    our_sum += tensor.to(torch::kDouble).sum().item<double>();
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) our_keys += name + " ";

  // And Python's torch.load reads the same dict.
  const std::string command =
      CUMULUS_PYTHON " -c \"import torch; sd = torch.load('" + path +
      "'); print(' '.join(sorted(sd)) + ' '); print(repr(sum(float(t.double().sum()) for t in "
      "sd.values())))\"";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  std::string output;
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  ASSERT_EQ(::pclose(pipe), 0) << output;
  std::istringstream in(output);
  std::string python_keys, python_sum;
  std::getline(in, python_keys);
  std::getline(in, python_sum);
  EXPECT_EQ(python_keys, our_keys);
  EXPECT_NEAR(std::stod(python_sum), our_sum, 1e-9 * std::max(1.0, std::abs(our_sum)));
}

TEST(TrainingTest, AMissingDatasetIsASetupErrorNamingTheDirectory) {
  auto e = smallExperiment("");
  e.data.dataset = configs::Dataset::kFashionMnist;
  e.data.dir = "/nonexistent/fashion";
  try {
    Trainer trainer(e, RunEnv{}, TrainerOptions{});
    FAIL() << "expected an exception";
  } catch (const SetupError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/fashion"), std::string::npos)
        << error.what();
  }
}

// The first 40 characters of each evaluation record of a metrics.jsonl: type, step and epoch.
std::vector<std::string> evalRecordHeads(const std::string& metrics_path) {
  std::vector<std::string> heads;
  for (const auto& line : readLines(metrics_path)) {
    if (line.rfind("{\"type\":\"eval\",", 0) == 0) heads.push_back(line.substr(0, 40));
  }
  return heads;
}

TEST(TrainingTest, EvaluatesAtEachEpochEndByDefault) {
  TempDir dir;
  auto e = smallExperiment(dir.path());
  e.trainer.epochs = 3;
  e.trainer.max_steps = 20;  // stops in the third epoch: evaluations at 8, 16 and 20
  Trainer trainer(e, RunEnv{}, TrainerOptions{});
  EXPECT_EQ(trainer.totalSteps(), 20);
  trainer.run();
  const std::vector<std::string> evals = evalRecordHeads(dir.path() + "/metrics.jsonl");
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_EQ(evals[0].rfind("{\"type\":\"eval\",\"step\":8,\"epoch\":1,", 0), 0u) << evals[0];
  EXPECT_EQ(evals[1].rfind("{\"type\":\"eval\",\"step\":16,\"epoch\":2,", 0), 0u) << evals[1];
  EXPECT_EQ(evals[2].rfind("{\"type\":\"eval\",\"step\":20,\"epoch\":3,", 0), 0u) << evals[2];
}

// A run that ends with an epoch: its last evaluation is in that epoch (the sampler's position is
// already in the next one), as the last step's record is.
TEST(TrainingTest, TheLastEvaluationIsInTheLastEpoch) {
  TempDir dir;
  auto e = smallExperiment(dir.path());
  e.trainer.epochs = 2;
  Trainer trainer(e, RunEnv{}, TrainerOptions{});
  EXPECT_EQ(trainer.totalSteps(), 16);
  trainer.run();
  const std::vector<std::string> evals = evalRecordHeads(dir.path() + "/metrics.jsonl");
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0].rfind("{\"type\":\"eval\",\"step\":8,\"epoch\":1,", 0), 0u) << evals[0];
  EXPECT_EQ(evals[1].rfind("{\"type\":\"eval\",\"step\":16,\"epoch\":2,", 0), 0u) << evals[1];
}

// Launching again a run that finished (its last step checkpointed) trains nothing, and reports
// the checkpoint's model, not zeros.
TEST(TrainingTest, AResumedFinishedRunReportsTheModelItRestored) {
  TempDir dir;
  auto e = smallExperiment(dir.path());
  e.trainer.max_steps = 12;
  e.checkpoint.every_steps = 6;
  e.checkpoint.async = false;
  TrainerOptions first_options;
  first_options.resume = ResumeMode::parse("none");
  Trainer first(e, RunEnv{}, first_options);
  const RunResult done = first.run();
  ASSERT_TRUE(done.test_accuracy.has_value());

  std::ostringstream console;
  TrainerOptions again_options;
  again_options.resume = ResumeMode::parse("auto");
  again_options.console = &console;
  Trainer again(e, RunEnv{}, again_options);
  const RunResult result = again.run();
  EXPECT_EQ(result.first_step, 12);
  EXPECT_TRUE(result.step_losses.empty());
  EXPECT_EQ(result.test_loss, done.test_loss);
  EXPECT_EQ(result.test_accuracy, done.test_accuracy);
  EXPECT_EQ(result.parameter_digest, done.parameter_digest);
  EXPECT_NE(console.str().find("the run was already complete at step 12: evaluating the "
                               "checkpoint's model only"),
            std::string::npos)
      << console.str();
}

// metrics.jsonl's records of `type`, in order.
std::vector<nlohmann::json> recordsOf(const std::string& path, const std::string& type) {
  std::vector<nlohmann::json> records;
  for (const std::string& line : readLines(path)) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] == type) records.push_back(std::move(record));
  }
  return records;
}

// Two ranks over a real group (threads over loopback): each train record says how many bytes rank
// 0 has handed to its transport since the launch began (the gradients' all-reduces, the loss sums,
// the evaluations), never fewer than the record before; the summary says the run's total, which
// adds the last boundary's evaluation and agreement to the last train record's. A run trained
// every step has no outer rounds, so no record names them.
TEST(TrainingTest, TwoRanksRecordTheBytesTheySent) {
  TempDir dir;
  const auto e = smallExperiment(dir.path());
  comm::MemoryStore store;
  distributed::runOnThreads(2, [&](int rank) {
    RunEnv env;
    env.rank = rank;
    env.world_size = 2;
    std::unique_ptr<cumulus::ProcessGroup> group = cumulus::testing::groupOverStore(env, store);
    TrainerOptions options;
    options.group = group.get();
    Trainer(e, env, options).run();
  });
  const std::string path = dir.path() + "/metrics.jsonl";
  const std::vector<nlohmann::json> train = recordsOf(path, "train");
  const std::vector<nlohmann::json> summary = recordsOf(path, "summary");
  ASSERT_EQ(train.size(), 5u);  // steps 1, 4, 8, 12, 16
  ASSERT_EQ(summary.size(), 1u);
  uint64_t before = 0;
  for (const nlohmann::json& record : train) {
    ASSERT_TRUE(record["comm_bytes_sent"].is_number_unsigned()) << record;
    const uint64_t sent = record["comm_bytes_sent"].get<uint64_t>();
    EXPECT_GT(sent, before) << "every step all-reduces the gradients: " << record;
    before = sent;
    EXPECT_FALSE(record.contains("outer_rounds")) << record;
    EXPECT_FALSE(record.contains("outer_wait_s")) << record;
  }
  ASSERT_TRUE(summary[0]["comm_bytes_sent"].is_number_unsigned()) << summary[0];
  EXPECT_GE(summary[0]["comm_bytes_sent"].get<uint64_t>(), before) << summary[0];
  EXPECT_FALSE(summary[0].contains("outer_rounds")) << summary[0];
}

TEST(TrainingTest, AWorldOfOneSendsNothing) {
  TempDir dir;
  runQuietly(smallExperiment(dir.path()), /*write_outputs=*/true);
  const std::string path = dir.path() + "/metrics.jsonl";
  const std::vector<nlohmann::json> train = recordsOf(path, "train");
  ASSERT_EQ(train.size(), 5u);
  for (const nlohmann::json& record : train) EXPECT_EQ(record["comm_bytes_sent"], 0) << record;
  const std::vector<nlohmann::json> summary = recordsOf(path, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["comm_bytes_sent"], 0) << summary[0];
  EXPECT_FALSE(summary[0].contains("outer_rounds")) << summary[0];
}

}  // namespace
}  // namespace cumulus::trainer
