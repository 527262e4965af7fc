#include "trainer/trainer.h"

#include "trainer/trainer_impl.h"

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

// `cache_dir`: where IDX files are kept decompressed (data::readIdx); empty: nowhere.
Datasets loadDatasets(const configs::DataConfig& config, uint64_t seed,
                      const std::string& cache_dir) {
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
    if (config.normalize) {
      const data::Normalization norm = data::computeNormalization(d.train);
      data::applyNormalization(d.train, norm);
      data::applyNormalization(d.test, norm);
    }
  } else if (config.dataset == "fashion-mnist" || config.dataset == "mnist") {
    // Bytes first: the statistics come from a histogram and the floats from one table lookup
    // per pixel, the same bits as converting and normalizing in two passes, in a third the time.
    const data::ByteImages train =
        data::loadMnistLikeBytes(config.dir, data::Split::kTrain, cache_dir);
    const data::ByteImages test =
        data::loadMnistLikeBytes(config.dir, data::Split::kTest, cache_dir);
    std::optional<data::Normalization> norm;
    if (config.normalize) norm = data::normalizationOfBytes(train.pixels);
    d.train = data::toFloatImages(train, norm);
    d.test = data::toFloatImages(test, norm);
  } else {
    throw std::invalid_argument("data.dataset: unknown dataset \"" + config.dataset +
                                "\" (known: fashion-mnist, mnist, synthetic)");
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

int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

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
  grad_accumulation = t.grad_accumulation;
  torch::set_num_threads(static_cast<int>(intraOpThreads(t.threads, env.local_world_size)));

  // Every rank keeps its own host's copy (a run_dir may or may not be shared between hosts).
  const bool cache = config.data.cache && options.write_outputs;
  data = loadDatasets(config.data, t.seed, cache ? t.run_dir + "/cache" : "");
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
  const int64_t k = grad_accumulation;
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

namespace {

// "step-00000012, step-00000010": the checkpoints a resume rejected, by directory name.
std::string rejectedNames(const std::vector<CheckpointWarning>& warnings) {
  std::string names;
  for (const CheckpointWarning& w : warnings) {
    if (!names.empty()) names += ", ";
    names += std::filesystem::path(w.path).filename().string();
  }
  return names;
}

}  // namespace

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
      resume_lines.push_back(warnings.empty()
                                 ? "no checkpoint in " + checkpointDir() + ": starting from step 0"
                                 : "no valid checkpoint in " + checkpointDir() + " (rejected: " +
                                       rejectedNames(warnings) + "): starting from step 0");
      return;
    }
    const auto& [info, loaded] = *found;
    ResumePlan plan;
    try {
      plan = planResume(config, env.world_size, loaded.state, info.path,
                        options.allow_config_change);
    } catch (const ResumeError& e) {
      // resume_lines are never printed once this throws: the error carries what was skipped.
      if (warnings.empty()) throw;
      std::string skipped;
      for (const CheckpointWarning& w : warnings) skipped += "; newer checkpoint skipped: " + w.str();
      throw ResumeError(e.what() + skipped);
    }
    restoreTraining(loaded, *model, *optimizer, info.path);
    sampler->restore(plan.sampler);
    start_step = std::min(plan.step, total_steps);
    grad_accumulation = plan.grad_accumulation;
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
  position.grad_accumulation = grad_accumulation;
  return captureSnapshot(*model, *optimizer, config, env, position);
}

// (test loss, test accuracy) over the whole test split. In a group each rank evaluates its
// contiguous slice and the sums are all-reduced, so every rank returns the same pair.

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
