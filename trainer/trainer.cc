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
#include "models/model.h"
#include "trainer/diloco_state.h"
#include "trainer/diloco_training.h"
#include "trainer/loss.h"
#include "trainer/model_checks.h"
#include "trainer/progress.h"
#include "trainer/rank_reduce.h"
#include "trainer/resume.h"
#include "trainer/startup_profile.h"
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

Trainer::Impl::Impl(const configs::Experiment& experiment, const RunEnv& env,
                    std::unique_ptr<GradientSync> sync, TrainerOptions options)
    : config_(experiment),
      env_(env),
      options_(std::move(options)),
      records_(config_.trainer.run_dir + "/tensorboard",
               options_.console != nullptr ? &std::cerr : nullptr) {
  if (options_.elastic == nullptr || config_.trainer.sync == configs::SyncMode::kDiloco) {
    own_sync_ = std::move(sync);
    sync_ = own_sync_.get();
    distributed_ = dynamic_cast<DataParallel*>(sync_);
  }
  if (cumulus::ProcessGroup* group = options_.group; group != nullptr) {
    if (options_.elastic != nullptr) {
      // In place the epoch decides the rank (a joiner's RANK and WORLD_SIZE are placeholders).
      if (group != &options_.elastic->group()) {
        throw SetupError("TrainerOptions::group must be &elastic->group() when elastic is set");
      }
      env_.rank = group->rank();
      env_.world_size = group->size();
      env_.generation = static_cast<int64_t>(group->generation());
    } else if (group->size() != env.world_size || group->rank() != env.rank) {
      throw SetupError("the process group (rank " + std::to_string(group->rank()) + " of " +
                       std::to_string(group->size()) + ") does not match RANK/WORLD_SIZE (" +
                       std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ")");
    }
    if (group->size() > 1) group_ = group;
  }
  buildElastic();
  build();
}

Trainer::Impl::~Impl() = default;

double Trainer::Impl::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Trainer::Impl::startupMark(const char* phase) {
  if (options_.startup) options_.startup->mark(phase);
}

void Trainer::Impl::build() {
  const auto& t = config_.trainer;
  checkBatchSizes(config_, env_.world_size);
  // Before anything is written (the data cache included): a second job in this run directory
  // stops here, naming the first. A joiner's rank is a placeholder until it is admitted; it
  // claims the directory then if it becomes the writer (afterReform).
  const bool joiner = elastic_->joining();
  checkpoints_ = std::make_unique<RunCheckpoints>(
      config_, options_, writes(), records_.current(),
      [this](int64_t done, double lr, bool preempted) { return snapshot(done, lr, preempted); });
  if (writes() && !joiner) checkpoints_->claimRunDir(env_.run_id, records_.pending());
  grad_accumulation_ = t.grad_accumulation;
  torch::set_num_threads(static_cast<int>(intraOpThreads(t.threads, env_.local_world_size)));

  // Every rank keeps its own host's copy (a run_dir may or may not be shared between hosts).
  const bool cache = config_.data.cache && options_.write_outputs;
  const Datasets data = loadDatasets(config_.data, t.seed, cache ? t.run_dir + "/cache" : "");
  train_source_ = data.train_source;
  data_lines_ = {"train data: " + data.train->describe(), "test data: " + data.test->describe()};
  test_data_ = data.test;
  startupMark("data");
  DistributedSampler sampler(data.train->size(), t.global_batch_size, t.seed, config_.data.shuffle,
                             config_.data.drop_last);
  batches_ = choose<BatchSource>(options_.batches,
                                 std::make_shared<SamplerBatchSource>(
                                     data.train, std::move(sampler), env_.rank, env_.world_size),
                                 "batches");
  shares_ = std::make_unique<BatchShares>(config_.trainer, batches_);
  total_steps_ =
      plannedSteps(t.epochs, batches_->stepsPerEpoch(), t.max_steps, t.global_batch_size);
  checkpoints_->setTotalSteps(total_steps_);
  precision_ = choosePrecision(config_.trainer.precision,
                               options_.cpu ? *options_.cpu : CpuFeatures::detect());
  loss_ = std::make_shared<const Loss>(Loss::named(config_.loss.name, precision_.precision));
  buildModel(*data.train);
  ModelCheck(*model_, *loss_, precision_.precision, config_).tokenIds(data);
  if (writes() && !joiner) checkpoints_->checkRoom(*model_, env_.world_size);
  startupMark("model");
  // Every rank restores the same checkpoint, before the broadcasts below make that moot. A joiner
  // reads nothing from disk: a live peer sends it the state (joinGroup).
  has_state_ = !joiner;
  if (has_state_) {
    resumeIfAsked();
    shares_->start(env_.world_size, records_.pending());  // a joiner's come with the group it joins
  }
  steps_done_ = start_step_;
  done_position_ = batches_->position();
  startupMark("resume");
  buildGroupParts();
  // In place the gradient sync is the Elastic's, built at start (run()) and again at each change
  // of membership; otherwise the Trainer's own, for the whole run. Either keeps the buffers (batch
  // norm's statistics) identical on every rank.
  std::vector<torch::Tensor> buffers;
  for (auto& [name, buffer] : model_->namedBuffers()) buffers.push_back(buffer);
  if (inPlace() && !diloco_) {
    elastic_->attach(params_, buffers);
  } else if (distributed_ != nullptr) {
    distributed_->attach(params_, buffers);
  } else {
    sync_->attach(params_);
  }
}

void Trainer::Impl::buildModel(const data::Examples& train) {
  models::ModelSpec spec;
  spec.name = config_.model.name;
  spec.hidden = config_.model.hidden;
  spec.dropout = config_.model.dropout;
  const auto sample = train.slice(0, 1).inputs.sizes().slice(1);  // one sample's shape
  spec.input_shape.assign(sample.begin(), sample.end());
  spec.num_classes = config_.model.num_classes;
  torch::manual_seed(config_.trainer.seed);  // the initial parameters are a function of the seed
  model_ = models::makeModel(spec);
  const ModelCheck check(*model_, *loss_, precision_.precision, config_);
  check.trainable();
  check.fitsData(train, train_source_);
  model_->train(true);
  params_ = model_->parameters();
  // Flat in the buckets DataParallel lays out (the same bucket_layout.h), so that it reduces
  // the optimizer's gradient buffers in place; the gradients exist before it attaches.
  flat_ = std::make_shared<distributed::FlatParameters>(
      params_,
      distributed::layoutOf(
          params_, distributed::mebibytes(config_.comm.bucket_cap_mb, "comm.bucket_cap_mb"),
          distributed::mebibytes(config_.comm.first_bucket_mb, "comm.first_bucket_mb")));
  flat_->zeroGrads();
  optimizer_ = makeFlatOptimizer(config_.optimizer, flat_);
  schedule_ = std::make_unique<LrSchedule>(config_.schedule, config_.optimizer.lr, total_steps_);
  diloco_ = buildDiloco(config_, *model_, params_, records_.pending());
  if (diloco_) {
    checkpoints_->setRankState([this] { return replicaRow(params_, *optimizer_, *diloco_); });
  }
}

// The defaults from the experiment, each offered to the caller's choice (TrainerOptions).
void Trainer::Impl::buildGroupParts() {
  TestSetEvaluatorOptions eval;
  eval.batch_size = config_.eval.batch_size;
  eval.every_steps = config_.eval.every_steps;
  eval.steps_per_epoch = batches_->stepsPerEpoch();
  eval.group = group_;
  eval.rank = env_.rank;
  eval.world_size = env_.world_size;
  eval.loss = loss_;
  evaluator_ =
      choose<Evaluator>(options_.evaluator, makeTestSetEvaluator(test_data_, eval), "evaluator");

  ProgressRecorderOptions record;
  record.console = options_.console;
  record.live = options_.live_progress;
  record.quiet = Progress::quietFor(env_.rank, config_.trainer.log_all_ranks);
  record.log_every_steps = config_.trainer.log_every_steps;
  if (writes()) record.metrics_path = config_.trainer.run_dir + "/metrics.jsonl";
  record.world_size = env_.world_size;
  if (group_ != nullptr && config_.comm.compression != Compression::kNone) {
    record.compression = compressionName(config_.comm.compression);
  }
  if (group_ != nullptr) {
    record.sum_over_ranks = [group = group_](double v) { return sumOverRanks(group, v); };
  }
  record.rank = env_.rank;
  record.goodput = records_.goodput();
  record.sinks = records_.sinks(writes(), env_);
  records_.use(choose<MetricsRecorder>(
      options_.metrics, std::make_shared<ProgressMetricsRecorder>(std::move(record)), "metrics"));
  checkpoints_->setMembership(writes(), env_.rank, env_.world_size, group_, distributed_);
}

void Trainer::Impl::buildElastic() {
  if (options_.elastic != nullptr) {
    if (options_.stop) {
      throw SetupError(
          "TrainerOptions::stop: in place the group's Elastic agrees on stops; give the "
          "wrapper to it (ElasticOptions::stop) instead");
    }
    elastic_ = options_.elastic;
  } else {
    ElasticOptions options;
    options.preemption.grace_seconds = options_.preemption_grace;
    options.preemption.watch_sigterm = options_.watch_sigterm;
    options.preemption.watch_sigusr1 = options_.watch_sigterm;
    options.stop = [choice = options_.stop](std::shared_ptr<StopAgreement> standard) {
      return choose<StopAgreement>(choice, std::move(standard), "stop");
    };
    own_elastic_ = std::make_unique<cumulus::Elastic>(group_, std::move(options));
    elastic_ = own_elastic_.get();
  }
  ElasticState state;
  state.capture = [this] { return captureState(); };
  state.restore = [this](const Checkpoint& checkpoint) { restoreState(checkpoint); };
  state.config = configs::toYaml(config_);
  elastic_->setState(std::move(state));
  elastic_->onFailure([this](const std::string& reason) { failureSeen(reason); });
  elastic_->onMembershipChange([this](const Membership& m) { membershipChanged(m); });
}

// --resume: none, auto (the newest valid checkpoint in checkpoint.dir, if any) or a directory.
// Every rank loads the same checkpoint (the directory is shared, and nothing writes it while the
// group starts) and restores parameters, buffers, optimizer state, sampler position and step.
void Trainer::Impl::resumeIfAsked() {
  const ResumeMode mode = options_.resume.value_or(ResumeMode::defaultFor(!env_.run_id.empty()));
  if (checkpoints_->guardOtherExperiment(mode.kind != ResumeMode::Kind::kNone,
                                         records_.pending())) {
    return;
  }
  if (mode.kind == ResumeMode::Kind::kNone) return;
  try {
    std::optional<std::pair<CheckpointInfo, Checkpoint>> found;
    std::vector<CheckpointWarning> warnings;
    if (mode.kind == ResumeMode::Kind::kPath) {
      Checkpoint loaded = checkpoints_->store().load(mode.path);
      const uint64_t step = loaded.state.step;
      found.emplace(CheckpointInfo{mode.path, step}, std::move(loaded));
    } else if (std::optional<Checkpoint> latest = checkpoints_->store().loadLatest(&warnings)) {
      // load() checked that state.pb's step is the directory's.
      const uint64_t step = latest->state.step;
      found.emplace(CheckpointInfo{checkpoints_->pathOf(static_cast<int64_t>(step)), step},
                    std::move(*latest));
    }
    for (const CheckpointWarning& w : warnings) {
      records_.warning(w.str() + "; not resuming from it");
    }
    if (!found) {
      records_.note(warnings.empty()
                        ? "no checkpoint in " + checkpoints_->dir() + ": starting from step 0"
                        : "no valid checkpoint in " + checkpoints_->dir() +
                              " (rejected: " + rejectedNames(warnings) + "): starting from step 0");
      return;
    }
    const auto& [info, loaded] = *found;
    ResumePlan plan;
    try {
      plan = planResume(config_, env_.world_size, loaded.state, info.path,
                        options_.allow_config_change);
    } catch (const ResumeError& e) {
      // The notes are never printed once this throws: the error carries what was skipped.
      if (warnings.empty()) throw;
      std::string skipped;
      for (const CheckpointWarning& w : warnings)
        skipped += "; newer checkpoint skipped: " + w.str();
      throw ResumeError(e.what() + skipped);
    }
    restoreTraining(loaded, *model_, *optimizer_, "checkpoint " + info.path);
    if (diloco_) {
      restoreDiloco(loaded, info.path, *diloco_, params_, *optimizer_, env_.rank, env_.world_size,
                    records_.pending());
    }
    checkpoints_->resumed(plan.step, residualsOf(loaded, info.path));
    batches_->restore(plan.sampler);
    start_step_ = std::min(plan.step, total_steps_);
    grad_accumulation_ = plan.grad_accumulation;
    samples_seen_ = plan.samples_seen;
    shares_->restore(plan.batch_shares);
    for (const std::string& line : plan.notes) records_.note(line);
    const std::string written = loaded.state.precision.empty() ? "fp32" : loaded.state.precision;
    const std::string now = precisionName(precision_.precision);
    if (written != now) {
      records_.note("the checkpoint was written in " + written + " and training goes on in " + now +
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
      !Progress::quietFor(made->joining() ? 0 : made->rank(), experiment.trainer.log_all_ranks)) {
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
