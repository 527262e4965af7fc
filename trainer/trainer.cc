#include "trainer/trainer.h"

#include <torch/torch.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include "comm/communicator.h"
#include "configs/parse.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "models/model.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_schedule.h"
#include "trainer/distributed_sync.h"
#include "trainer/gradient_sync.h"
#include "trainer/metrics.h"
#include "trainer/optimizer.h"
#include "trainer/preemption.h"
#include "trainer/process_group.h"
#include "trainer/progress.h"
#include "trainer/resume.h"
#include "trainer/schedule.h"
#include "trainer/startup_profile.h"
#include "trainer/state_dict.h"
#include "trainer/trace.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

constexpr int64_t kNumClasses = 10;  // every dataset we load has ten classes

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The generator seed of one step: each field passes through the mixer so that neighbouring
// (epoch, step, rank) triples give unrelated streams.
uint64_t stepSeed(uint64_t seed, int64_t epoch, int64_t step, int64_t rank) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<uint64_t>(epoch));
  h = splitmix64(h ^ static_cast<uint64_t>(step));
  return splitmix64(h ^ static_cast<uint64_t>(rank));
}

struct Datasets {
  data::TensorDataset train;
  data::TensorDataset test;
};

Datasets loadDatasets(const configs::DataConfig& config, uint64_t seed) {
  Datasets d;
  if (config.dataset == "synthetic") {
    // One draw split in two, so train and test share the class patterns.
    const int64_t n_train = config.synthetic_train_samples;
    const int64_t n_test = config.synthetic_test_samples;
    const data::TensorDataset all = data::makeSynthetic(n_train + n_test, seed);
    d.train = {all.images.narrow(0, 0, n_train).contiguous(),
               all.labels.narrow(0, 0, n_train).contiguous()};
    d.test = {all.images.narrow(0, n_train, n_test).contiguous(),
              all.labels.narrow(0, n_train, n_test).contiguous()};
  } else if (config.dataset == "fashion-mnist" || config.dataset == "mnist") {
    d.train = data::loadMnistLike(config.dir, data::Split::kTrain);
    d.test = data::loadMnistLike(config.dir, data::Split::kTest);
  } else {
    throw std::invalid_argument("data.dataset: unknown dataset \"" + config.dataset +
                                "\" (known: fashion-mnist, mnist, synthetic)");
  }
  if (config.normalize) {
    const data::Normalization norm = data::computeNormalization(d.train);
    data::applyNormalization(d.train, norm);
    data::applyNormalization(d.test, norm);
  }
  return d;
}

// Zero-fills every gradient in place, creating it where missing, so gradient tensors keep one
// storage for the whole run (what a bucketing GradientSync wants to view).
void zeroGrads(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    if (p.grad().defined()) {
      p.grad().zero_();
    } else {
      p.mutable_grad() = torch::zeros_like(p);
    }
  }
}

// The steps since the last train record: console and metrics show their mean loss, because one
// step's loss is too noisy to read, and their throughput, training time only (no evaluation).
struct StepWindow {
  double loss = 0;
  double seconds = 0;
  double comm_wait = 0;  // of `seconds`, blocked waiting for the gradient all-reduce
  int64_t steps = 0;
  int64_t samples = 0;

  void add(double step_loss, double step_seconds, double step_comm_wait, int64_t step_samples) {
    loss += step_loss;
    seconds += step_seconds;
    comm_wait += step_comm_wait;
    samples += step_samples;
    ++steps;
  }
  double meanLoss() const { return steps > 0 ? loss / static_cast<double>(steps) : 0; }
  double samplesPerSec() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }
  double stepTimeMs() const {
    return steps > 0 ? 1000.0 * seconds / static_cast<double>(steps) : 0;
  }
  double commWaitMs() const {
    return steps > 0 ? 1000.0 * comm_wait / static_cast<double>(steps) : 0;
  }
};

std::string formatEpochs(double epochs) {
  char text[32];
  if (std::fabs(epochs - std::round(epochs)) < 1e-9) {
    std::snprintf(text, sizeof(text), "%.0f", epochs);
  } else {
    std::snprintf(text, sizeof(text), "%.2f", epochs);
  }
  return text;
}

// CUMULUS_FAULT_SIGTERM_AT_STEP=S[:R]: a test hook that makes rank R (every rank without :R)
// raise a real SIGTERM at itself after step S, so a stop lands at a chosen step. -1: unset.
int64_t faultSigtermStep(int64_t rank) {
  const char* text = std::getenv("CUMULUS_FAULT_SIGTERM_AT_STEP");
  if (text == nullptr || *text == 0) return -1;
  char* end = nullptr;
  const long long step = std::strtoll(text, &end, 10);
  if (*end == ':' && std::strtoll(end + 1, nullptr, 10) != rank) return -1;
  return step;
}

int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct Trainer::Impl {
  configs::Experiment config;
  RunEnv env;
  TrainerOptions options;
  std::unique_ptr<GradientSync> sync;
  DistributedGradientSync* distributed = nullptr;  // `sync`, when it is one
  comm::Communicator* comm = nullptr;              // options.group's, or null (world of one)
  double last_comm_wait = 0;                       // seconds in sync->finish() of the last step
  Datasets data;
  std::unique_ptr<data::DistributedSampler> sampler;
  std::unique_ptr<models::Model> model;
  std::vector<torch::Tensor> params;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  int64_t total_steps = 0;
  bool ran = false;
  // Checkpoints and resume (DESIGN.md "Preemption protocol").
  PosixFileSystem fs;
  std::unique_ptr<CheckpointManager> checkpoints;  // rank 0 writes; every rank may read
  int64_t start_step = 0;                          // completed steps this run starts after
  uint64_t samples_seen = 0;                       // global samples consumed so far
  std::vector<std::string> resume_lines;           // printed once the console is up
  std::unique_ptr<std::ofstream> ledger;           // CUMULUS_SAMPLE_LEDGER (tests)
  int64_t ledger_launch = 0;

  double now() const {
    if (options.clock) return options.clock();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  bool writes() const { return options.write_outputs && env.rank == 0; }
  void startupMark(const char* phase) {
    if (options.startup) options.startup->mark(phase);
  }

  void build();
  void checkModelFitsData();
  double trainStep(int64_t step);
  std::pair<double, double> evaluate();
  double sumOverRanks(double value);    // all ranks call it; needs `comm`
  int64_t maxOverRanks(int64_t value);  // all ranks call it; identity in a world of one
  std::string checkpointDir() const;
  void resumeIfAsked();
  CheckpointSnapshot snapshot(int64_t done, double lr, bool preempted);
  std::unique_ptr<MetricsLog> openRunDir();
  std::pair<double, double> evaluateAndReport(int64_t step, int64_t epoch, Progress& progress,
                                              MetricsLog* metrics);
  void writeFinalOutputs(const RunResult& result, MetricsLog& metrics);
  RunResult run();
};

void Trainer::Impl::build() {
  const auto& t = config.trainer;
  if (t.grad_accumulation < 1)
    throw std::invalid_argument("trainer.grad_accumulation: must be >= 1");
  if (config.eval.batch_size < 1) throw std::invalid_argument("eval.batch_size: must be >= 1");
  if (t.global_batch_size < env.world_size * t.grad_accumulation) {
    throw std::invalid_argument(
        "trainer.global_batch_size: " + std::to_string(t.global_batch_size) +
        " leaves some micro-batch empty; it must be >= world size x trainer.grad_accumulation = " +
        std::to_string(env.world_size * t.grad_accumulation));
  }
  torch::set_num_threads(static_cast<int>(intraOpThreads(t.threads, env.local_world_size)));

  data = loadDatasets(config.data, t.seed);
  startupMark("data");
  sampler = std::make_unique<data::DistributedSampler>(
      data.train.size(), t.global_batch_size, t.seed, config.data.shuffle, config.data.drop_last);
  total_steps = std::max<int64_t>(0, t.epochs) * sampler->stepsPerEpoch();
  if (t.max_steps > 0) total_steps = std::min(total_steps, t.max_steps);
  if (total_steps <= 0) {
    throw std::invalid_argument("trainer.epochs / trainer.max_steps: the run has no steps");
  }

  models::ModelSpec spec;
  spec.name = config.model.name;
  spec.hidden = config.model.hidden;
  spec.dropout = config.model.dropout;
  spec.input_shape = {data.train.images.size(1), data.train.images.size(2),
                      data.train.images.size(3)};
  spec.num_classes = kNumClasses;
  torch::manual_seed(t.seed);  // the initial parameters are a function of the seed alone
  model = models::makeModel(spec);
  checkModelFitsData();
  model->train(true);
  params = model->parameters();
  optimizer = makeOptimizer(config.optimizer, params);
  schedule = std::make_unique<LrSchedule>(config.schedule, config.optimizer.lr, total_steps);
  checkpoints = std::make_unique<CheckpointManager>(
      checkpointDir(), static_cast<size_t>(std::max<int64_t>(1, config.checkpoint.keep)), fs);
  startupMark("model");
  // Every rank restores the same checkpoint, before the broadcasts below make that moot.
  resumeIfAsked();
  startupMark("resume");
  if (comm != nullptr) {
    // Each rank found its checkpoint by itself: a rank that saw another one (a directory not
    // shared, a file that failed to verify on one host only) would silently diverge.
    const int64_t highest = maxOverRanks(start_step);
    const int64_t lowest = -maxOverRanks(-start_step);
    if (highest != lowest) {
      throw std::invalid_argument("ranks resume from different steps (" + std::to_string(lowest) +
                                  " to " + std::to_string(highest) + "; this rank " +
                                  std::to_string(env.rank) + ": " + std::to_string(start_step) +
                                  "): every rank must see the same " + checkpointDir());
    }
  }
  if (const char* path = std::getenv("CUMULUS_SAMPLE_LEDGER"); path != nullptr && *path != 0) {
    ledger = std::make_unique<std::ofstream>(std::string(path) + ".rank" + std::to_string(env.rank),
                                             std::ios::app);
    // One id for every rank of this launch (their clocks start apart): the latest start.
    ledger_launch = maxOverRanks(unixMillis());
  }
  if (distributed != nullptr) {
    // Buffers (batch-norm statistics) are not gradients: broadcast them once, like parameters.
    std::vector<torch::Tensor> buffers;
    for (auto& [name, buffer] : model->namedBuffers()) buffers.push_back(buffer);
    if (!buffers.empty()) distributed->broadcastTensors(buffers);
  }
  sync->attach(params);
  startupMark("broadcast");
}

// A model that does not fit the data (a TorchScript file made for other inputs) fails here, as a
// setup error, rather than in the first step. Evaluation mode: no dropout, so no random draws.
void Trainer::Impl::checkModelFitsData() {
  torch::NoGradGuard no_grad;
  model->train(false);
  const torch::Tensor logits = model->forward(data.train.images.narrow(0, 0, 1));
  if (logits.dim() != 2 || logits.size(0) != 1 || logits.size(1) != kNumClasses) {
    std::ostringstream shape;
    shape << logits.sizes();
    throw std::invalid_argument("model \"" + config.model.name + "\" returns logits of shape " +
                                shape.str() + " for one sample; expected [1, " +
                                std::to_string(kNumClasses) + "]");
  }
}

// One optimizer step; returns this rank's training loss (its share of the global mean, so at
// world size 1 the mean loss over the global batch).
double Trainer::Impl::trainStep(int64_t step) {
  const int64_t epoch = sampler->state().epoch;
  const int64_t global_size = static_cast<int64_t>(sampler->globalBatch().size());
  const std::vector<int64_t> local = sampler->localIndices(env.rank, env.world_size);
  const int64_t k = config.trainer.grad_accumulation;
  const auto n = static_cast<int64_t>(local.size());

  TraceRecorder* trace = options.trace;
  if (ledger) *ledger << ledgerLine(ledger_launch, epoch, step, env.rank, local) << std::flush;
  torch::manual_seed(stepSeed(config.trainer.seed, epoch, step, env.rank));
  zeroGrads(params);
  double loss_sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const bool last = i == k - 1;
    const int64_t begin = i * n / k;
    const int64_t end = (i + 1) * n / k;
    sync->beforeBackward(last);
    if (end > begin) {
      torch::Tensor loss;
      {
        TraceRecorder::Span span(trace, "forward");
        const std::vector<int64_t> rows(local.begin() + begin, local.begin() + end);
        const data::Batch batch = data::gather(data.train, rows);
        const torch::Tensor logits = model->forward(batch.images);
        loss = torch::nn::functional::cross_entropy(
                   logits, batch.labels,
                   torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
               static_cast<double>(global_size);
      }
      {
        TraceRecorder::Span span(trace, "backward");
        loss.backward();
      }
      loss_sum += loss.item<double>();
    }
    sync->afterBackward(last);
  }
  const double wait_start = now();
  sync->finish();
  last_comm_wait = now() - wait_start;
  TraceRecorder::Span span(trace, "optimizer");
  if (config.trainer.grad_clip_norm > 0) clipGradNorm(params, config.trainer.grad_clip_norm);
  optimizer->step(schedule->lr(step));
  sampler->advance();
  if (!std::isfinite(loss_sum)) {
    throw TrainError("training diverged at step " + std::to_string(step + 1) + " (loss " +
                     std::to_string(loss_sum) +
                     "); lower optimizer.lr or set trainer.grad_clip_norm");
  }
  return loss_sum;
}

double Trainer::Impl::sumOverRanks(double value) {
  comm::Buffer buffer{&value, 1, comm::DType::kFloat64};
  comm::AllreduceOptions op;
  op.algorithm = comm::Algorithm::kTree;  // fixed, so the sum is the same from run to run
  comm->allreduce(buffer, op);
  return value;
}

int64_t Trainer::Impl::maxOverRanks(int64_t value) {
  if (comm == nullptr) return value;
  comm::Buffer buffer{&value, 1, comm::DType::kInt64};
  comm::AllreduceOptions op;
  op.op = comm::ReduceOp::kMax;
  op.algorithm = comm::Algorithm::kTree;  // never the funnel's parameter server for one integer
  comm->allreduce(buffer, op);
  return value;
}

std::string Trainer::Impl::checkpointDir() const {
  return config.checkpoint.dir.empty() ? config.trainer.run_dir + "/checkpoints"
                                       : config.checkpoint.dir;
}

// --resume: none, auto (the newest valid checkpoint in checkpointDir(), if any) or a directory.
// Every rank loads the same checkpoint (the directory is shared, and nothing writes it while the
// group starts) and restores parameters, buffers, optimizer state, sampler position and step.
void Trainer::Impl::resumeIfAsked() {
  const ResumeMode mode = options.resume.empty() ? ResumeMode::defaultFor(!env.run_id.empty())
                                                 : ResumeMode::parse(options.resume);
  if (mode.kind == ResumeMode::Kind::kNone) return;
  try {
    std::optional<std::pair<CheckpointInfo, CheckpointSnapshot>> found;
    std::vector<CheckpointWarning> warnings;
    if (mode.kind == ResumeMode::Kind::kPath) {
      CheckpointSnapshot loaded = checkpoints->load(mode.path);
      const uint64_t step = loaded.state.step();
      found.emplace(CheckpointInfo{mode.path, step}, std::move(loaded));
    } else {
      found = checkpoints->loadLatestValid(warnings);
    }
    for (const CheckpointWarning& w : warnings) {
      resume_lines.push_back("warning: " + w.str() + "; not resuming from it");
    }
    if (!found) {
      resume_lines.push_back("no checkpoint in " + checkpointDir() + ": starting from step 0");
      return;
    }
    const auto& [info, loaded] = *found;
    const ResumePlan plan =
        planResume(config, env.world_size, loaded.state, info.path, options.allow_config_change);
    restoreTraining(loaded, *model, *optimizer, info.path);
    sampler->restore(plan.sampler);
    start_step = std::min(plan.step, total_steps);
    samples_seen = plan.samples_seen;
    resume_lines.insert(resume_lines.end(), plan.notes.begin(), plan.notes.end());
  } catch (const ResumeError& e) {
    throw SetupError(e.what());
  } catch (const CheckpointError& e) {
    throw SetupError(std::string(e.what()) + "; use --resume auto or none");
  }
}

CheckpointSnapshot Trainer::Impl::snapshot(int64_t done, double lr, bool preempted) {
  TrainingPosition position;
  position.steps_done = done;
  position.sampler = sampler->state();
  position.samples_seen = samples_seen;
  position.learning_rate = lr;
  position.preempted = preempted;
  return captureSnapshot(*model, *optimizer, config, env, position);
}

// (test loss, test accuracy) over the whole test split. In a group each rank evaluates its
// contiguous slice and the sums are all-reduced, so every rank returns the same pair.
std::pair<double, double> Trainer::Impl::evaluate() {
  TraceRecorder::Span span(options.trace, "evaluate");
  torch::NoGradGuard no_grad;
  model->train(false);
  const int64_t n = data.test.size();
  // Without a group (a test driving one rank by hand) this rank evaluates everything.
  const int64_t shards = comm != nullptr ? env.world_size : 1;
  const int64_t shard = comm != nullptr ? env.rank : 0;
  const int64_t first = n * shard / shards;
  const int64_t last = n * (shard + 1) / shards;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t begin = first; begin < last; begin += config.eval.batch_size) {
    const int64_t rows = std::min(config.eval.batch_size, last - begin);
    const torch::Tensor images = data.test.images.narrow(0, begin, rows);
    const torch::Tensor labels = data.test.labels.narrow(0, begin, rows);
    const torch::Tensor logits = model->forward(images);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    correct += logits.argmax(1).eq(labels).sum().item<int64_t>();
  }
  if (comm != nullptr) {
    // Counts are integers far below 2^53, so the float64 sum is exact.
    double sums[2] = {loss_sum, static_cast<double>(correct)};
    comm::Buffer buffer{sums, 2, comm::DType::kFloat64};
    comm::AllreduceOptions op;
    op.algorithm = comm::Algorithm::kTree;  // fixed: the loss sum is bit-identical across runs
    comm->allreduce(buffer, op);
    loss_sum = sums[0];
    correct = static_cast<int64_t>(sums[1]);
  }
  model->train(true);
  return {loss_sum / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n)};
}

std::unique_ptr<MetricsLog> Trainer::Impl::openRunDir() {
  if (!writes()) return nullptr;
  const std::string& dir = config.trainer.run_dir;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw std::runtime_error(dir + ": cannot create the run directory: " + error.message());
  std::ofstream yaml(dir + "/config.yaml", std::ios::trunc);
  yaml << configs::toYaml(config);
  if (!yaml) throw std::runtime_error(dir + "/config.yaml: write failed");
  // MetricsLog starts a fresh file: a resumed run keeps the earlier records beside it.
  const std::string path = dir + "/metrics.jsonl";
  if (start_step > 0 && std::filesystem::exists(path)) {
    std::filesystem::rename(path,
                            dir + "/metrics.before-" +
                                CheckpointManager::dirName(static_cast<uint64_t>(start_step)) +
                                ".jsonl",
                            error);
  }
  return std::make_unique<MetricsLog>(path);
}

std::pair<double, double> Trainer::Impl::evaluateAndReport(int64_t step, int64_t epoch,
                                                           Progress& progress,
                                                           MetricsLog* metrics) {
  const auto [loss, accuracy] = evaluate();
  char text[160];
  std::snprintf(text, sizeof(text),
                "eval  epoch %lld  step %lld  test_loss %.4f  test_accuracy %.4f",
                static_cast<long long>(epoch), static_cast<long long>(step), loss, accuracy);
  progress.line(text);
  if (metrics != nullptr) {
    metrics->write(JsonLine()
                       .add("type", "eval")
                       .add("step", step)
                       .add("epoch", epoch)
                       .add("test_loss", loss)
                       .add("test_accuracy", accuracy));
  }
  return {loss, accuracy};
}

void Trainer::Impl::writeFinalOutputs(const RunResult& result, MetricsLog& metrics) {
  auto tensors = model->namedParameters();
  for (auto& buffer : model->namedBuffers()) tensors.push_back(std::move(buffer));
  saveStateDict(tensors, config.trainer.run_dir + "/model_state_dict.pt");
  metrics.write(JsonLine()
                    .add("type", "summary")
                    .add("steps", result.steps)
                    .add("epochs", result.epochs)
                    .add("test_loss", result.test_loss)
                    .add("test_accuracy", result.test_accuracy)
                    .add("wall_seconds", result.seconds)
                    .add("parameters", model->parameterCount())
                    .add("world_size", env.world_size));
}

RunResult Trainer::Impl::run() {
  const auto& t = config.trainer;
  std::ostringstream discard;
  std::ostream& console = options.console != nullptr ? *options.console : discard;
  const int64_t steps_per_epoch = sampler->stepsPerEpoch();
  const int64_t epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
  Progress progress(console, options.live_progress, total_steps, epochs, t.log_every_steps);
  const std::unique_ptr<MetricsLog> metrics = openRunDir();
  progress.line("model: " + model->summary());
  for (const std::string& line : resume_lines) progress.line(line);

  // Step boundaries (DESIGN.md "Training step" 4): a checkpoint when one is due, written by rank 0
  // alone (the replicas are identical) in the background; a stop when the ranks agree on one.
  PreemptionOptions stop_options;
  stop_options.grace_seconds = options.preemption_grace;
  stop_options.watch_sigterm = options.watch_sigterm;
  PreemptionWatcher watcher([this](int64_t v) { return maxOverRanks(v); }, stop_options);
  watcher.startWatchdog();
  CheckpointSchedule due(config.checkpoint.every_steps, config.checkpoint.every_seconds,
                         options.clock);
  const bool saves = writes();
  std::map<int64_t, double> stall_ms;  // step -> the training thread's pause for its checkpoint
  int64_t saved_step = -1;             // the newest step handed to the checkpoint manager
  auto reportSaves = [&] {
    for (const SaveResult& r : checkpoints->takeCompleted()) {
      char text[320];
      std::snprintf(
          text, sizeof(text),
          "checkpoint step %llu: %s (stall %.2f ms, encode %.3f s, write %.3f s, %.1f MB)",
          static_cast<unsigned long long>(r.step), r.path.c_str(),
          stall_ms[static_cast<int64_t>(r.step)], r.encode_seconds, r.write_seconds,
          static_cast<double>(r.bytes) / 1e6);
      progress.line(text);
      for (const auto& w : r.warnings) progress.line("warning: " + w.str());
    }
  };
  const int64_t fault_step = faultSigtermStep(env.rank);

  RunResult result;
  result.first_step = start_step;
  const double start = now();
  StepWindow window;
  std::pair<double, double> eval{0, 0};
  for (int64_t s = start_step; s < total_steps; ++s) {
    const int64_t epoch = sampler->state().epoch + 1;  // 1-based, for people
    const auto samples = static_cast<int64_t>(sampler->globalBatch().size());
    const double lr = schedule->lr(s);
    const double step_start = now();
    const double loss = trainStep(s);
    window.add(loss, now() - step_start, last_comm_wait, samples);
    result.step_losses.push_back(loss);
    const int64_t done = s + 1;
    samples_seen += static_cast<uint64_t>(samples);
    if (s == start_step) {
      std::string text = "first step " + std::to_string(done) + " completed";
      if (options.startup) {
        options.startup->mark("step");
        text += ", " + options.startup->summary();
      }
      progress.line(text);
    }

    const bool record = done == 1 || done == total_steps ||
                        (t.log_every_steps > 0 && done % t.log_every_steps == 0);
    // Each rank's loss is its share of the global mean: records show the sum over ranks (one
    // small all-reduce per record, not per step); a live line in between scales the local share.
    if (record && comm != nullptr) window.loss = sumOverRanks(window.loss);
    const double shown_loss =
        window.meanLoss() * (record || comm == nullptr ? 1.0 : static_cast<double>(env.world_size));
    progress.update({done, epoch, shown_loss, window.samplesPerSec(), now() - start});
    if (record) {
      if (metrics) {
        metrics->write(JsonLine()
                           .add("type", "train")
                           .add("step", done)
                           .add("epoch", epoch)
                           .add("loss", shown_loss)
                           .add("lr", lr)
                           .add("samples_per_sec", window.samplesPerSec())
                           .add("step_time_ms", window.stepTimeMs())
                           .add("compute_ms", window.stepTimeMs() - window.commWaitMs())
                           .add("comm_wait_ms", window.commWaitMs()));
      }
      window = StepWindow();
    }
    const bool eval_due = config.eval.every_steps > 0 ? done % config.eval.every_steps == 0
                                                      : done % steps_per_epoch == 0;
    if (eval_due || done == total_steps)
      eval = evaluateAndReport(done, epoch, progress, metrics.get());

    if (done == total_steps) break;
    if (done == fault_step) ::raise(SIGTERM);
    if (saves && due.enabled() && due.due(done)) {
      const double pause = now();
      try {
        CheckpointSnapshot snap = snapshot(done, lr, false);
        if (config.checkpoint.async) {
          checkpoints->saveAsync(std::move(snap));
        } else {
          checkpoints->save(snap);  // reported by takeCompleted like a background one
        }
        saved_step = done;
      } catch (const CheckpointError& e) {
        // The previous checkpoint stays the newest valid one; training goes on.
        progress.line(std::string("warning: checkpoint failed: ") + e.what());
      }
      stall_ms[done] = 1000.0 * (now() - pause);
      due.markSaved();
    }
    reportSaves();
    if (watcher.shouldStop(done)) {
      const std::string path = checkpointDir() + "/" + CheckpointManager::dirName(done);
      if (saves) {
        if (saved_step == done) {
          checkpoints->waitForPending();
        } else {
          const double pause = now();
          checkpoints->save(snapshot(done, lr, true));
          stall_ms[done] = 1000.0 * (now() - pause);
        }
        reportSaves();
      }
      maxOverRanks(0);  // no rank exits before rank 0's checkpoint is durable
      result.preempted = true;
      result.steps = done;
      result.checkpoint = path;
      progress.line("preempted at step " + std::to_string(done) + ", checkpoint " + path);
      break;
    }
  }
  progress.finish();
  if (saves) {
    checkpoints->waitForPending();
    reportSaves();
  }
  {
    const int64_t ran = (result.preempted ? result.steps : total_steps) - start_step;
    char text[96];
    std::snprintf(text, sizeof(text), "trained %lld steps in %.3f s", static_cast<long long>(ran),
                  now() - start);
    progress.line(text);
  }
  if (result.preempted) {
    result.seconds = now() - start;
    return result;
  }

  result.test_loss = eval.first;
  result.test_accuracy = eval.second;
  result.steps = total_steps;
  result.epochs = static_cast<double>(total_steps) / static_cast<double>(steps_per_epoch);
  result.seconds = now() - start;
  if (metrics) writeFinalOutputs(result, *metrics);
  if (env.rank == 0) {
    result.parameter_digest = parameterDigest(*model);
    progress.line("final parameters sha256 " + result.parameter_digest);
  }
  char text[200];
  std::snprintf(text, sizeof(text),
                "test accuracy %.4f (loss %.4f) after %s epochs, %lld steps, %.1f s",
                result.test_accuracy, result.test_loss, formatEpochs(result.epochs).c_str(),
                static_cast<long long>(result.steps), result.seconds);
  progress.line(text);
  return result;
}

namespace {

// LibTorch's c10::Error carries a C++ backtrace in what(); users get the message alone.
template <typename F>
auto translateTorchErrors(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::Error& e) {
    throw TrainError(e.what_without_backtrace());
  }
}

}  // namespace

namespace {

std::unique_ptr<GradientSync> makeSync(const configs::Experiment& experiment,
                                       const TrainerOptions& options) {
  if (options.group == nullptr) return std::make_unique<LocalGradientSync>();
  DistributedSyncOptions sync_options;
  try {
    sync_options = DistributedSyncOptions::fromConfig(experiment.comm);
  } catch (const std::invalid_argument& e) {
    throw SetupError(e.what());
  }
  sync_options.trace = options.trace;
  return std::make_unique<DistributedGradientSync>(options.group->communicator(), sync_options);
}

}  // namespace

Trainer::Trainer(const configs::Experiment& experiment, const RunEnv& env, TrainerOptions options)
    : Trainer(experiment, env, makeSync(experiment, options), std::move(options)) {}

Trainer::Trainer(const configs::Experiment& experiment, const RunEnv& env,
                 std::unique_ptr<GradientSync> sync, TrainerOptions options)
    : impl_(std::make_unique<Impl>()) {
  TORCH_INTERNAL_ASSERT(sync != nullptr, "Trainer needs a GradientSync");
  impl_->config = experiment;
  impl_->env = env;
  impl_->options = std::move(options);
  impl_->sync = std::move(sync);
  impl_->distributed = dynamic_cast<DistributedGradientSync*>(impl_->sync.get());
  if (impl_->options.group != nullptr) {
    if (impl_->options.group->world() != env.world_size ||
        impl_->options.group->rank() != env.rank) {
      throw SetupError("the process group (rank " + std::to_string(impl_->options.group->rank()) +
                       " of " + std::to_string(impl_->options.group->world()) +
                       ") does not match RANK/WORLD_SIZE (" + std::to_string(env.rank) + " of " +
                       std::to_string(env.world_size) + ")");
    }
    impl_->comm = &impl_->options.group->communicator();
  }
  try {
    impl_->build();
  } catch (const data::DataError& e) {
    throw SetupError(e.what());
  } catch (const std::invalid_argument& e) {
    throw SetupError(e.what());
  } catch (const c10::Error& e) {
    throw SetupError(e.what_without_backtrace());
  }
}

Trainer::~Trainer() = default;

std::string Trainer::modelSummary() const { return impl_->model->summary(); }
int64_t Trainer::totalSteps() const { return impl_->total_steps; }
int64_t Trainer::stepsPerEpoch() const { return impl_->sampler->stepsPerEpoch(); }
models::Model& Trainer::model() { return *impl_->model; }

RunResult Trainer::run() {
  if (impl_->ran) throw std::logic_error("Trainer::run() may be called once");
  impl_->ran = true;
  return translateTorchErrors([&] { return impl_->run(); });
}

}  // namespace cumulus::trainer
