// Building a Trainer: the data, the model and its optimizer, the step loop's parts (the defaults
// from the experiment, or the caller's), and a resume from a checkpoint.
#include "trainer/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_schedule.h"
#include "configs/parse.h"
#include "cumulus/checkpoint.h"
#include "cumulus/data_parallel.h"
#include "cumulus/elastic.h"
#include "cumulus/preemption.h"
#include "cumulus/process_group.h"
#include "cumulus/sampler.h"
#include "data/npy.h"
#include "distributed/trace.h"
#include "metrics/progress.h"
#include "metrics/startup_profile.h"
#include "models/model.h"
#include "trainer/diloco_state.h"
#include "trainer/diloco_training.h"
#include "trainer/loss.h"
#include "trainer/model_checks.h"
#include "trainer/rank_reduce.h"
#include "trainer/resume.h"
#include "trainer/step_count.h"
#include "trainer/trainer_impl.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

// The caller's choice of a part (TrainerOptions), given the default.
template <typename Part>
std::shared_ptr<Part> choose(const PartChoice<Part>& choice, std::shared_ptr<Part> standard,
                             const char* field) {
  if (!choice) return standard;
  std::shared_ptr<Part> chosen = choice(std::move(standard));
  if (!chosen) {
    throw SetupError(std::string("TrainerOptions::") + field +
                     " returned no part; return the default it is given to keep it");
  }
  return chosen;
}

// "step-00000012, step-00000010": the checkpoints a resume rejected, by directory name.
std::string rejectedNames(const std::vector<CheckpointWarning>& warnings) {
  std::string names;
  for (const CheckpointWarning& w : warnings) {
    if (!names.empty()) names += ", ";
    names += std::filesystem::path(w.path).filename().string();
  }
  return names;
}

// Each bucket's all-reduce as a span on the trace's comm thread.
std::function<void(const BucketEvent&)> traceBuckets(distributed::TraceRecorder* trace) {
  return [trace](const BucketEvent& e) {
    nlohmann::ordered_json args{
        {"bytes", e.bytes}, {"params", e.params}, {"algorithm", e.algorithm}, {"seq", e.seq}};
    if (e.failed) args["failed"] = true;
    trace->record("allreduce bucket " + std::to_string(e.bucket),
                  distributed::TraceRecorder::kCommTid, e.launched, e.completed, std::move(args));
  };
}

}  // namespace

DataParallelOptions syncOptions(const configs::Experiment& experiment,
                                distributed::TraceRecorder* trace) {
  DataParallelOptions sync;
  sync.algorithm = experiment.comm.algorithm;
  sync.bucket_cap_mb = experiment.comm.bucket_cap_mb;
  sync.first_bucket_mb = experiment.comm.first_bucket_mb;
  sync.timeout_seconds = experiment.comm.timeout_seconds;
  sync.compression = experiment.comm.compression;
  // The gradients already lie in the buckets' layout (FlatParameters): reduced where they are.
  sync.gradient_as_bucket_view = true;
  if (trace != nullptr) sync.on_bucket_done = traceBuckets(trace);
  return sync;
}

std::unique_ptr<GradientSync> makeSync(const configs::Experiment& experiment,
                                       cumulus::ProcessGroup* group,
                                       distributed::TraceRecorder* trace) {
  // DiLoCo's inner steps use each rank's own gradients; its outer syncs are the DiLoCo's.
  if (group == nullptr || group->size() == 1 ||
      experiment.trainer.sync == configs::SyncMode::kDiloco) {
    return std::make_unique<LocalGradientSync>();
  }
  try {
    return std::make_unique<DataParallel>(*group, syncOptions(experiment, trace));
  } catch (const GroupError& e) {
    throw SetupError(std::string("comm.") + e.what());
  }
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

TrainerParts::TrainerParts(const configs::Experiment& experiment, const RunEnv& run_env,
                           TrainerOptions trainer_options)
    : config(experiment), env(run_env), options(std::move(trainer_options)) {}

TrainerParts::~TrainerParts() = default;

void TrainerParts::note(const std::string& line) {
  if (recorder) {
    recorder->note(line);
  } else {
    pending.push_back(line);
  }
}

void TrainerParts::flushPending() {
  if (!recorder) return;
  for (const std::string& line : pending) recorder->note(line);
  pending.clear();
}

void TrainerParts::warning(const std::string& line) {
  if (recorder) {
    recorder->warning(line);
  } else {
    pending.push_back(line.rfind("warning: ", 0) == 0 ? line : "warning: " + line);
  }
}

double TrainerParts::now() const {
  if (options.clock) return options.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void TrainerParts::startupMark(const char* phase) {
  if (options.startup) options.startup->mark(phase);
}

Checkpoint TrainerParts::checkpointAt(const RunEnv& as, int64_t done, double lr, bool preempted) {
  TrainingPosition position;
  position.steps_done = done;
  position.sampler = done == progress.steps_done ? progress.sampler : batches->position();
  position.samples_seen = progress.samples_seen;
  position.learning_rate = lr;
  position.preempted = preempted;
  position.grad_accumulation = progress.grad_accumulation;
  position.batch_shares = shares->current();
  position.precision = precisionName(precision.precision);
  Checkpoint checkpoint = captureCheckpoint(*model, *optimizer, config, as, position);
  if (diloco) addDiloco(checkpoint, *diloco, *model);
  return checkpoint;
}

Trainer::Impl::Impl(const configs::Experiment& experiment, const RunEnv& env,
                    std::unique_ptr<GradientSync> sync, TrainerOptions options)
    : parts_(experiment, env, std::move(options)),
      recovery_(parts_, [this] { buildGroupParts(); }),
      loop_(parts_, recovery_) {
  takeGroup(std::move(sync));
  buildElastic();
  build();
}

Trainer::Impl::~Impl() = default;

// The gradient sync (the Trainer's own, unless in place) and the group the run starts in.
void Trainer::Impl::takeGroup(std::unique_ptr<GradientSync> sync) {
  if (parts_.options.elastic == nullptr ||
      parts_.config.trainer.sync == configs::SyncMode::kDiloco) {
    parts_.own_sync = std::move(sync);
    parts_.sync = parts_.own_sync.get();
    parts_.distributed = dynamic_cast<DataParallel*>(parts_.sync);
  }
  cumulus::ProcessGroup* group = parts_.options.group;
  if (group == nullptr) return;
  if (parts_.options.elastic != nullptr) {
    // In place the epoch decides the rank (a joiner's RANK and WORLD_SIZE are placeholders).
    if (group != &parts_.options.elastic->group()) {
      throw SetupError("TrainerOptions::group must be &elastic->group() when elastic is set");
    }
    parts_.env.rank = group->rank();
    parts_.env.world_size = group->size();
    parts_.env.generation = static_cast<int64_t>(group->generation());
  } else if (group->size() != parts_.env.world_size || group->rank() != parts_.env.rank) {
    throw SetupError("the process group (rank " + std::to_string(group->rank()) + " of " +
                     std::to_string(group->size()) + ") does not match RANK/WORLD_SIZE (" +
                     std::to_string(parts_.env.rank) + " of " +
                     std::to_string(parts_.env.world_size) + ")");
  }
  if (group->size() > 1) parts_.group = group;
}

void Trainer::Impl::build() {
  const auto& t = parts_.config.trainer;
  checkBatchSizes(parts_.config, parts_.env.world_size);
  // Before anything is written (the data cache included): a second job in this run directory
  // stops here, naming the first. A joiner's rank is a placeholder until it is admitted; it
  // claims the directory then if it becomes the writer (InPlaceRecovery::membershipChanged).
  const bool joiner = parts_.elastic->joining();
  parts_.checkpoints = std::make_unique<RunCheckpoints>(
      parts_.config, parts_.options, parts_.writes(), parts_.recorder,
      [this](int64_t done, double lr, bool preempted) {
        return parts_.checkpointAt(parts_.env, done, lr, preempted);
      });
  if (parts_.writes() && !joiner)
    parts_.checkpoints->claimRunDir(parts_.env.run_id, parts_.pending);
  parts_.progress.grad_accumulation = t.grad_accumulation;
  torch::set_num_threads(static_cast<int>(intraOpThreads(t.threads, parts_.env.local_world_size)));

  // Every rank keeps its own host's copy (a run_dir may or may not be shared between hosts).
  const bool cache = parts_.config.data.cache && parts_.options.write_outputs;
  const Datasets data = loadDatasets(parts_.config.data, t.seed, cache ? t.run_dir + "/cache" : "");
  parts_.train_source = data.train_source;
  parts_.data_lines = {"train data: " + data.train->describe(),
                       "test data: " + data.test->describe()};
  parts_.test_data = data.test;
  parts_.startupMark("data");
  DistributedSampler sampler(data.train->size(), t.global_batch_size, t.seed,
                             parts_.config.data.shuffle, parts_.config.data.drop_last);
  parts_.batches = choose<BatchSource>(
      parts_.options.batches,
      std::make_shared<SamplerBatchSource>(data.train, std::move(sampler), parts_.env.rank,
                                           parts_.env.world_size),
      "batches");
  parts_.shares = std::make_unique<BatchShares>(parts_.config.trainer, parts_.batches);
  parts_.total_steps =
      plannedSteps(t.epochs, parts_.batches->stepsPerEpoch(), t.max_steps, t.global_batch_size);
  parts_.checkpoints->setTotalSteps(parts_.total_steps);
  parts_.precision =
      choosePrecision(parts_.config.trainer.precision,
                      parts_.options.cpu ? *parts_.options.cpu : CpuFeatures::detect());
  parts_.loss = std::make_shared<const Loss>(
      Loss::named(parts_.config.loss.name, parts_.precision.precision));
  buildModel(*data.train);
  ModelCheck(*parts_.model, *parts_.loss, parts_.precision.precision, parts_.config).tokenIds(data);
  if (parts_.writes() && !joiner)
    parts_.checkpoints->checkRoom(*parts_.model, parts_.env.world_size);
  parts_.startupMark("model");
  // Every rank restores the same checkpoint, before the broadcasts below make that moot. A joiner
  // reads nothing from disk: a live peer sends it the state (Elastic::start, in StepLoop::start).
  if (!joiner) {
    resumeIfAsked();
    // A joiner's shares come with the group it joins.
    parts_.shares->start(parts_.env.world_size, parts_.pending);
  }
  parts_.progress.steps_done = parts_.start_step;
  parts_.progress.sampler = parts_.batches->position();
  parts_.startupMark("resume");
  buildGroupParts();
  attachSync();
}

// In place the gradient sync is the Elastic's, built at start (run()) and again at each change of
// membership; otherwise the Trainer's own, for the whole run. Either keeps the buffers (batch
// norm's statistics) identical on every rank.
void Trainer::Impl::attachSync() {
  std::vector<torch::Tensor> buffers;
  for (auto& [name, buffer] : parts_.model->namedBuffers()) buffers.push_back(buffer);
  if (parts_.inPlace() && !parts_.diloco) {
    parts_.elastic->attach(parts_.params, buffers);
  } else if (parts_.distributed != nullptr) {
    parts_.distributed->attach(parts_.params, buffers);
  } else {
    parts_.sync->attach(parts_.params);
  }
}

void Trainer::Impl::buildModel(const data::Examples& train) {
  models::ModelSpec spec;
  spec.name = parts_.config.model.name;
  spec.hidden = parts_.config.model.hidden;
  spec.dropout = parts_.config.model.dropout;
  const auto sample = train.slice(0, 1).inputs.sizes().slice(1);  // one sample's shape
  spec.input_shape.assign(sample.begin(), sample.end());
  spec.num_classes = parts_.config.model.num_classes;
  // The initial parameters are a function of the seed.
  torch::manual_seed(parts_.config.trainer.seed);
  parts_.model = models::makeModel(spec);
  const ModelCheck check(*parts_.model, *parts_.loss, parts_.precision.precision, parts_.config);
  check.trainable();
  check.fitsData(train, parts_.train_source);
  parts_.model->train(true);
  parts_.params = parts_.model->parameters();
  // Flat in the buckets DataParallel lays out (the same bucket_layout.h), so that it reduces
  // the optimizer's gradient buffers in place; the gradients exist before it attaches.
  parts_.flat = std::make_shared<distributed::FlatParameters>(
      parts_.params,
      distributed::layoutOf(
          parts_.params,
          distributed::mebibytes(parts_.config.comm.bucket_cap_mb, "comm.bucket_cap_mb"),
          distributed::mebibytes(parts_.config.comm.first_bucket_mb, "comm.first_bucket_mb")));
  parts_.flat->zeroGrads();
  parts_.optimizer = makeFlatOptimizer(parts_.config.optimizer, parts_.flat);
  parts_.schedule = std::make_unique<LrSchedule>(parts_.config.schedule, parts_.config.optimizer.lr,
                                                 parts_.total_steps);
  parts_.diloco = buildDiloco(parts_.config, *parts_.model, parts_.params, parts_.pending);
  if (parts_.diloco) {
    parts_.checkpoints->setRankState(
        [this] { return replicaRow(parts_.params, *parts_.optimizer, *parts_.diloco); });
  }
}

// The defaults from the experiment, each offered to the caller's choice (TrainerOptions).
void Trainer::Impl::buildGroupParts() {
  TestSetEvaluatorOptions eval;
  eval.batch_size = parts_.config.eval.batch_size;
  eval.every_steps = parts_.config.eval.every_steps;
  eval.steps_per_epoch = parts_.batches->stepsPerEpoch();
  eval.group = parts_.group;
  eval.rank = parts_.env.rank;
  eval.world_size = parts_.env.world_size;
  eval.loss = parts_.loss;
  parts_.evaluator = choose<Evaluator>(parts_.options.evaluator,
                                       makeTestSetEvaluator(parts_.test_data, eval), "evaluator");

  parts_.checkpoints->setMembership(parts_.writes(), parts_.env.rank, parts_.env.world_size,
                                    parts_.group, parts_.distributed);
}

void Trainer::Impl::buildElastic() {
  if (parts_.options.elastic != nullptr) {
    if (parts_.options.stop) {
      throw SetupError(
          "TrainerOptions::stop: in place the group's Elastic agrees on stops; give the "
          "wrapper to it (ElasticOptions::stop) instead");
    }
    parts_.elastic = parts_.options.elastic;
  } else {
    ElasticOptions options;
    options.preemption.grace_seconds = parts_.options.preemption_grace;
    options.preemption.watch_sigterm = parts_.options.watch_sigterm;
    options.preemption.watch_sigusr1 = parts_.options.watch_sigterm;
    options.stop = [choice = parts_.options.stop](std::shared_ptr<StopAgreement> standard) {
      return choose<StopAgreement>(choice, std::move(standard), "stop");
    };
    parts_.own_elastic = std::make_unique<cumulus::Elastic>(parts_.group, std::move(options));
    parts_.elastic = parts_.own_elastic.get();
  }
  recovery_.connect();
}

// --resume: none, auto (the newest valid checkpoint in checkpoint.dir, if any) or a directory.
// Every rank loads the same checkpoint (the directory is shared, and nothing writes it while the
// group starts) and restores parameters, buffers, optimizer state, sampler position and step.
void Trainer::Impl::resumeIfAsked() {
  const ResumeMode mode =
      parts_.options.resume.value_or(ResumeMode::defaultFor(!parts_.env.run_id.empty()));
  if (parts_.checkpoints->guardOtherExperiment(mode.kind != ResumeMode::Kind::kNone,
                                               parts_.pending)) {
    return;
  }
  if (mode.kind == ResumeMode::Kind::kNone) return;
  try {
    std::optional<std::pair<CheckpointInfo, Checkpoint>> found;
    std::vector<CheckpointWarning> warnings;
    if (mode.kind == ResumeMode::Kind::kPath) {
      Checkpoint loaded = parts_.checkpoints->store().load(mode.path);
      const uint64_t step = loaded.state.step;
      found.emplace(CheckpointInfo{mode.path, step}, std::move(loaded));
    } else if (std::optional<Checkpoint> latest =
                   parts_.checkpoints->store().loadLatest(&warnings)) {
      // load() checked that state.pb's step is the directory's.
      const uint64_t step = latest->state.step;
      found.emplace(CheckpointInfo{parts_.checkpoints->pathOf(static_cast<int64_t>(step)), step},
                    std::move(*latest));
    }
    for (const CheckpointWarning& w : warnings) {
      parts_.warning(w.str() + "; not resuming from it");
    }
    if (!found) {
      parts_.note(warnings.empty()
                      ? "no checkpoint in " + parts_.checkpoints->dir() + ": starting from step 0"
                      : "no valid checkpoint in " + parts_.checkpoints->dir() +
                            " (rejected: " + rejectedNames(warnings) + "): starting from step 0");
      return;
    }
    const auto& [info, loaded] = *found;
    ResumePlan plan;
    try {
      plan = planResume(parts_.config, parts_.env.world_size, loaded.state, info.path,
                        parts_.options.allow_config_change);
    } catch (const ResumeError& e) {
      // The notes are never printed once this throws: the error carries what was skipped.
      if (warnings.empty()) throw;
      std::string skipped;
      for (const CheckpointWarning& w : warnings)
        skipped += "; newer checkpoint skipped: " + w.str();
      throw ResumeError(e.what() + skipped);
    }
    restoreTraining(loaded, *parts_.model, *parts_.optimizer, "checkpoint " + info.path);
    if (parts_.diloco) {
      restoreDiloco(loaded, info.path, *parts_.diloco, parts_.params, *parts_.optimizer,
                    parts_.env.rank, parts_.env.world_size, parts_.pending);
    }
    parts_.checkpoints->resumed(plan.step, residualsOf(loaded, info.path));
    parts_.batches->restore(plan.sampler);
    parts_.start_step = std::min(plan.step, parts_.total_steps);
    parts_.progress.grad_accumulation = plan.grad_accumulation;
    parts_.progress.samples_seen = plan.samples_seen;
    parts_.shares->restore(plan.batch_shares);
    for (const std::string& line : plan.notes) parts_.note(line);
    const std::string written = loaded.state.precision.empty() ? "fp32" : loaded.state.precision;
    const std::string now = precisionName(parts_.precision.precision);
    if (written != now) {
      parts_.note("the checkpoint was written in " + written + " and training goes on in " + now +
                  " (its weights and optimizer state are float32 in both)");
    }
  } catch (const ResumeError& e) {
    throw SetupError(e.what());
  } catch (const CheckpointError& e) {
    throw SetupError(std::string(e.what()) + "; use --resume auto or none");
  }
}

// Each rank found its checkpoint by itself: a rank that saw another one (a directory not shared, a
// file that failed to verify on one host only) would silently diverge.
Trainer::Trainer(const configs::Experiment& experiment, const RunEnv& env, TrainerOptions options)
    : Trainer(experiment, env,
              options.elastic != nullptr ? std::make_unique<LocalGradientSync>()  // not used
                                         : makeSync(experiment, options.group, options.trace),
              std::move(options)) {}

std::shared_ptr<cumulus::Elastic> connectInPlace(const configs::Experiment& experiment,
                                                 const cumulus::GroupOptions& group,
                                                 distributed::TraceRecorder* trace,
                                                 TrainerOptions& options) {
  if (!cumulus::Elastic::inPlaceRequested()) return nullptr;
  ElasticOptions elastic;
  elastic.group = group;
  elastic.data_parallel = syncOptions(experiment, trace);
  elastic.preemption.grace_seconds = options.preemption_grace;
  elastic.preemption.watch_sigterm = options.watch_sigterm;
  elastic.preemption.watch_sigusr1 = options.watch_sigterm;
  auto made = std::make_shared<cumulus::Elastic>(std::move(elastic));
  options.elastic = made.get();
  options.group = &made->group();
  if (options.console != nullptr &&
      !metrics::Progress::quietFor(made->joining() ? 0 : made->rank(),
                                   experiment.trainer.log_all_ranks)) {
    *options.console << (made->joining()
                             ? "member " + made->memberId() +
                                   ": joining the running group (recovery in_place)"
                             : "rank " + std::to_string(made->rank()) + " of " +
                                   std::to_string(made->size()) + ": connected (generation " +
                                   std::to_string(made->group().generation()) +
                                   ", recovery in_place, comm.algorithm " +
                                   algorithmName(experiment.comm.algorithm) + ")")
                     << std::endl;
  }
  return made;
}

Trainer::Trainer(const configs::Experiment& experiment, const RunEnv& env,
                 std::unique_ptr<GradientSync> sync, TrainerOptions options) {
  TORCH_INTERNAL_ASSERT(sync != nullptr, "Trainer needs a GradientSync");
  try {
    impl_ = std::make_unique<Impl>(experiment, env, std::move(sync), std::move(options));
  } catch (const data::DataError& e) {
    throw SetupError(e.what());
  } catch (const std::invalid_argument& e) {
    throw SetupError(e.what());
  } catch (const c10::Error& e) {
    throw SetupError(e.what_without_backtrace());
  }
}

Trainer::~Trainer() = default;

int64_t Trainer::totalSteps() const { return impl_->totalSteps(); }
int64_t Trainer::stepsPerEpoch() const { return impl_->stepsPerEpoch(); }
models::Model& Trainer::model() { return impl_->model(); }

RunResult Trainer::run() {
  return translateTorchErrors([&] { return impl_->run(); });
}

}  // namespace cumulus::trainer
