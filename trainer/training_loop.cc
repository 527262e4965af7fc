// The step loop (StepLoop, over the TrainerParts of trainer_impl.h): for each step, this rank's
// batch, forward and backward, the gradient sync, the optimizer step; then the records, an
// evaluation when due, a checkpoint when the policy says so, and the ranks' agreement on whether to
// go on.
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <utility>

#include "api/recorder_hooks.h"
#include "configs/parse.h"
#include "cumulus/checkpoint.h"
#include "cumulus/process_group.h"
#include "distributed/trace.h"
#include "metrics/recorder.h"
#include "metrics/startup_profile.h"
#include "trainer/diloco_training.h"
#include "trainer/divergence.h"
#include "trainer/loss.h"
#include "trainer/rank_reduce.h"
#include "trainer/trainer_impl.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

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

}  // namespace

// 1-based, as the step records number them: the sampler's position after the last step of an
// epoch is already in the next one.
int64_t StepLoop::epochOfStep(int64_t done) const {
  return done <= 0 ? 1 : (done - 1) / parts_.batches->stepsPerEpoch() + 1;
}

RunResult StepLoop::run() {
  if (ran_) throw std::logic_error("Trainer::run() may be called once");
  ran_ = true;
  // The run directory is this job's until run() ends, however it ends: the next run in it, in
  // this process too, takes it then.
  struct ReleaseRunDir {
    TrainerParts& parts;
    ~ReleaseRunDir() { parts.checkpoints->releaseRunDir(); }
  } release{parts_};
  const bool joiner = parts_.elastic->joining();
  if (!start()) return RunResult{};
  if (joiner) {
    // The state a live peer sent (its error feedback starts at zero).
    parts_.start_step = parts_.progress.steps_done;
  } else {
    parts_.checkpoints->restoreResiduals(parts_.pending);
    parts_.startupMark("broadcast");
  }
  if (parts_.writes()) prepareRunDir();
  beginRecords();
  startWatchdog();
  // However run() ends, nothing is watched after it.
  struct StopWatching {
    std::unique_ptr<StepWatchdog>& watchdog;
    ~StopWatching() { watchdog.reset(); }
  } stop_watching{parts_.watchdog};

  RunResult result;
  result.first_step = parts_.start_step;
  result.precision = parts_.precision.precision;
  const double start = parts_.now();
  Evaluation eval;
  while (parts_.elastic->step() < parts_.total_steps) {
    if (stepAndBoundary(eval, result) != Boundary::kNext) break;
  }
  // The last boundary, unless the run stopped before it or resumed with nothing left to train.
  if (!result.preempted && parts_.start_step < parts_.total_steps) lastBoundary(eval);
  result.reforms = recovery_.reforms();
  parts_.watchdog.reset();
  if (parts_.start_step >= parts_.total_steps) {
    // Resumed from the last step's checkpoint: nothing to train, but the results are still the
    // model's, not zeros.
    parts_.recorder->note("the run was already complete at step " +
                          std::to_string(parts_.total_steps) +
                          ": evaluating the checkpoint's model only");
    eval = evaluateAt(parts_.total_steps, epochOfStep(parts_.total_steps));
  }
  parts_.checkpoints->finish();  // the records of writes that end after the steps did
  if (!result.preempted) parts_.elastic->finish();
  if (result.preempted) {
    // A member that left on a notice records nothing more (the group trains on without it).
    if (!result.left) parts_.recorder->preempted(result.checkpoint);
    result.seconds = parts_.now() - start;
    return result;
  }
  finishRun(eval, start, result);
  return result;
}

// A replacement waits here to be admitted and takes the state from a live peer. A launch member
// runs the group's first collectives here (DiLoCo's start among them), recovering in place from a
// peer lost during them.
bool StepLoop::start() {
  bool admitted = false;
  try {
    admitted = parts_.elastic->start(parts_.start_step, [this] {
      if (parts_.diloco && parts_.start_step == 0 && parts_.group != nullptr) {
        startDiloco(*parts_.diloco, *parts_.group, *parts_.model, parts_.params);
      }
    });
  } catch (const std::invalid_argument& e) {
    // The ranks resumed from different checkpoints, or built different models.
    throw SetupError(std::string(e.what()) + " (checkpoints in " + parts_.checkpoints->dir() + ")");
  }
  if (!admitted && parts_.options.console != nullptr) {
    *parts_.options.console << "the group finished training before this member was admitted; "
                               "nothing to do"
                            << std::endl;
  }
  return admitted;
}

// The records (<cumulus/recorder.h>, as any Elastic loop's): their first lines are the model, the
// precision, what the run reads and what set-up and the resume found; then the batch shares the
// launch starts with. A launch that resumed from a checkpoint takes over the goodput account of
// the launches before it.
void StepLoop::beginRecords() {
  const configs::TrainerConfig& t = parts_.config.trainer;
  RecorderOptions o;
  if (parts_.options.write_outputs) o.run_dir = t.run_dir;
  o.total_steps = parts_.total_steps;
  o.steps_per_epoch = parts_.batches->stepsPerEpoch();
  o.log_every_steps = t.log_every_steps;
  o.start_step = parts_.start_step;
  o.console = parts_.options.console;
  o.live_progress = parts_.options.live_progress;
  o.log_all_ranks = t.log_all_ranks;
  o.model = parts_.model->summary();
  o.precision = parts_.precision;
  if (parts_.config.comm.compression != Compression::kNone) {
    o.compression = compressionName(parts_.config.comm.compression);
  }
  o.diloco = parts_.diloco.get();
  RecorderHooks hooks;
  hooks.startup = parts_.options.startup;
  if (parts_.options.metrics) {
    hooks.wrap = [this](std::shared_ptr<metrics::MetricsRecorder> standard) {
      return choose<metrics::MetricsRecorder>(parts_.options.metrics, std::move(standard),
                                              "metrics");
    };
  }
  parts_.recorder = makeRecorder(*parts_.elastic, std::move(o), std::move(hooks));
  for (const std::string& line : parts_.data_lines) parts_.recorder->note(line);
  parts_.flushPending();
  parts_.shares->record("start", parts_.env.world_size, *parts_.recorder);
}

void StepLoop::startWatchdog() {
  if (!parts_.options.step_watchdog) return;
  StepWatchdogOptions options;
  options.timeout_seconds = parts_.config.trainer.step_timeout_seconds;
  parts_.watchdog = std::make_unique<StepWatchdog>(std::move(options));
  parts_.watchdog->start();
}

namespace {

// DiLoCo's inner steps send nothing, so each step carries a 4-byte sum of its own, started once
// this rank has drawn the step and waited for before the inner optimizer step changes anything: a
// member lost before it drew the step makes it fail, and the step is redone without it with the new
// shares (as the gradient sum does every step), rather than trained by the survivors alone with its
// share of the batch left out. It runs in the background, so that a distant link's latency hides
// behind the forward and backward. Every collective of the step is queued after it, so a sync that
// completed means this sum did too.
class MembersDrew {
 public:
  MembersDrew(ProcessGroup* group, int64_t step, int64_t members) : step_(step), members_(members) {
    if (group == nullptr) return;
    count_ = torch::ones({1});
    work_ = group->allreduceAsync(count_);
  }

  void wait() {
    if (!work_) return;
    work_->wait();
    if (count_.item<float>() != static_cast<float>(members_)) {
      throw std::logic_error("step " + std::to_string(step_ + 1) + ": " +
                             std::to_string(count_.item<float>()) + " members drew it, not " +
                             std::to_string(members_));
    }
  }

 private:
  int64_t step_, members_;
  torch::Tensor count_;
  std::unique_ptr<Work> work_;  // waited for (its error dropped) if the step throws first
};

}  // namespace

// Step boundaries (docs/design.md "A step"): the boundary's own work (balance, evaluation,
// checkpoint) and the members' agreement, each of which a peer's failure may interrupt; Elastic
// then re-forms the group and the loop goes on from parts_.elastic->step().
StepLoop::Boundary StepLoop::stepAndBoundary(Evaluation& eval, RunResult& result) {
  std::optional<StepOutcome> step;
  int64_t s = 0;
  double lr = 0;
  parts_.elastic->train([&] {
    s = parts_.elastic->step();  // again after a re-forming: another member may have been ahead
    lr = parts_.schedule->lr(s);
    step = trainStep(s);
  });
  // A member that had completed the step sent its state: nothing of the step ran here to record.
  if (!step || parts_.elastic->step() != s + 1) return Boundary::kNext;
  result.step_losses.push_back(step->loss);
  // The step's record sums the loss over the ranks: a collective, so it is boundary work too.
  const auto record = [&] { recordStep(s, *step, lr); };

  const int64_t done = s + 1;
  if (done == parts_.total_steps) {
    // The last step's record; the rest of its boundary is lastBoundary's, which no failure skips.
    parts_.elastic->atBoundary(record);
    return Boundary::kNext;
  }
  const bool boundary_done = parts_.elastic->atBoundary([&] {
    record();
    // Before the checkpoints below, which keep the shares it sets.
    parts_.shares->atBoundary(done, parts_.group, parts_.progress.grad_accumulation,
                              *parts_.recorder);
    if (parts_.evaluator->due(done)) eval = evaluateAt(done, step->epoch);
    parts_.checkpoints->save(parts_.checkpoints->dueAtStepEnd(done, false), done, lr);
  });
  if (!boundary_done) return Boundary::kNext;
  const ElasticAction action = parts_.elastic->boundary();
  if (action == ElasticAction::kLeave) {
    result.preempted = true;
    result.left = true;
    result.steps = done;
    parts_.recorder->warning(
        "preempted at step " + std::to_string(done) + ": rank " + std::to_string(parts_.env.rank) +
        " leaves the group, which trains on with " +
        std::to_string(parts_.env.world_size -
                       static_cast<int64_t>(parts_.elastic->leaving().size())) +
        " worker(s); no checkpoint needed");
    return Boundary::kStop;
  }
  if (action == ElasticAction::kStop && !parts_.elastic->leaving().empty()) {
    parts_.recorder->note("preemption notice for rank(s) " + rankList(parts_.elastic->leaving()) +
                          ": too few workers would remain, so every rank checkpoints and stops");
  }
  if (action == ElasticAction::kCheckpoint) {
    parts_.recorder->note("checkpoint requested at step " + std::to_string(done) +
                          "; training goes on");
  }
  const StepAction agreed = action == ElasticAction::kCheckpoint ? StepAction::kCheckpoint
                            : action == ElasticAction::kStop     ? StepAction::kStop
                                                                 : StepAction::kContinue;
  if (!parts_.elastic->atBoundary([&] {
        parts_.checkpoints->save(parts_.checkpoints->dueAfterAgreement(done, agreed), done, lr);
      })) {
    return Boundary::kNext;
  }
  if (agreed == StepAction::kStop && parts_.elastic->atBoundary([&] { stopAt(done, result); })) {
    return Boundary::kStop;
  }
  return Boundary::kNext;
}

// After the last step, on every member of whatever group is left: DiLoCo's last round, the final
// evaluation, the final weights and the last checkpoint. A peer's failure part of the way runs it
// again, whole, on the re-formed group (Elastic::atEnd): there is no next step to move on to.
void StepLoop::lastBoundary(Evaluation& eval) {
  const int64_t done = parts_.total_steps;
  const double lr = parts_.schedule->lr(done - 1);
  parts_.elastic->atEnd([&] {
    if (parts_.diloco)
      parts_.diloco->syncAll(parts_.group);  // agrees first where a failure cut it short
    eval = evaluateAt(done, epochOfStep(done));
    parts_.checkpoints->saveFinalWeights(
        *parts_.model);  // first: the weights survive a failed last one
    parts_.checkpoints->save(parts_.checkpoints->dueAtStepEnd(done, true), done, lr);
  });
}

// One optimizer step; its loss is this rank's share of the global mean (at world size 1 the mean
// loss over the global batch).
StepLoop::StepOutcome StepLoop::trainStep(int64_t step) {
  const double start = parts_.now();
  if (parts_.watchdog) parts_.watchdog->beginStep(step + 1, parts_.env.rank, StepPhase::kData);
  StepBatch batch;
  {
    // Gathering the rows: inside "forward" before the BatchSource split it out.
    distributed::TraceRecorder::Span span(parts_.options.trace, "batch");
    batch = parts_.batches->next(step, parts_.progress.grad_accumulation);
  }
  if (batch.micro_batches.empty()) {
    throw TrainError("the batch source gave no micro-batch for step " + std::to_string(step + 1));
  }
  torch::manual_seed(stepSeed(parts_.config.trainer.seed, batch.epoch, step, parts_.env.rank));
  MembersDrew drew(parts_.diloco ? parts_.group : nullptr, step, parts_.env.world_size);
  // DiLoCo: the fragment due before this step is synced (with overlap, started) before anything
  // of the step changes the state, so that a failed sync leaves the step to redo.
  const double outer_before = parts_.diloco ? parts_.diloco->stats().wait_seconds : 0;
  if (parts_.diloco) {
    parts_.markPhase(StepPhase::kSync);
    distributed::TraceRecorder::Span span(parts_.options.trace, "outer sync");
    parts_.diloco->beginStep(step, parts_.group);
  }
  // In place, one zero_() per bucket: the gradients keep their flat storage for the whole run.
  parts_.flat->zeroGrads();
  StepOutcome outcome;
  outcome.loss = forwardBackward(batch);
  const double wait_start = parts_.now();
  int64_t samples = 0;
  for (const data::Batch& micro : batch.micro_batches) {
    if (micro.targets.defined()) samples += micro.targets.size(0);
  }
  // The compute rate leaves out the time blocked in an outer sync before the forward.
  const double outer_waited =
      parts_.diloco ? parts_.diloco->stats().wait_seconds - outer_before : 0;
  parts_.shares->measure(samples, wait_start - start - outer_waited);
  parts_.markPhase(StepPhase::kSync);
  {
    distributed::TraceRecorder::Span span(
        parts_.distributed != nullptr ? parts_.options.trace : nullptr, "comm wait");
    parts_.sync->finish();
  }
  if (parts_.diloco) {
    distributed::TraceRecorder::Span span(parts_.options.trace, "outer sync");
    try {
      drew.wait();
    } catch (...) {
      parts_.diloco->cancel();  // the fragment beginStep started: the step is redone from its start
      throw;
    }
    parts_.diloco->endStep();  // with overlap: the fragment lands before the inner step
  }
  outcome.comm_wait =
      parts_.now() - wait_start + outer_waited;  // endStep's wait is in the first part
  parts_.markPhase(StepPhase::kOptimizer);
  optimizerStep(step);
  if (parts_.watchdog) parts_.watchdog->endStep();
  // Committed: this rank's state has taken the step (an in-place re-forming starts from here).
  parts_.progress.steps_done = step + 1;
  parts_.progress.sampler = parts_.batches->position();
  parts_.progress.samples_seen += static_cast<uint64_t>(batch.global_samples);
  if (!std::isfinite(outcome.loss)) {
    throw TrainError(divergenceMessage(parts_.config, step + 1, outcome.loss, parts_.diloco.get()));
  }
  outcome.epoch = batch.epoch + 1;
  outcome.samples = batch.global_samples;
  outcome.local_samples = samples;
  outcome.seconds = parts_.now() - start;
  return outcome;
}

// Each micro-batch's loss, summed over its samples (trainer/loss.h), is divided by the whole
// global batch, so the gradients the sync
// adds up are those of the global mean (data_parallel.h). A micro-batch with no rows on this rank
// runs no backward but still tells the sync.
double StepLoop::forwardBackward(const StepBatch& batch) {
  distributed::TraceRecorder* trace = parts_.options.trace;
  const size_t k = batch.micro_batches.size();
  double loss_sum = 0;
  // DiLoCo: each replica steps on the mean over its own share; the record keeps the share of the
  // global mean, so that the ranks' losses still add up to it.
  double divisor = static_cast<double>(batch.global_samples);
  if (parts_.diloco) {
    int64_t local = 0;
    for (const data::Batch& micro : batch.micro_batches) {
      if (micro.targets.defined()) local += micro.targets.size(0);
    }
    divisor = static_cast<double>(std::max<int64_t>(local, 1));
  }
  const double to_global = divisor / static_cast<double>(batch.global_samples);
  for (size_t i = 0; i < k; ++i) {
    const bool last = i + 1 == k;
    const data::Batch& micro = batch.micro_batches[i];
    parts_.sync->beforeBackward(last);
    if (micro.targets.defined() && micro.targets.size(0) > 0) {
      torch::Tensor loss;
      parts_.markPhase(StepPhase::kForward);
      {
        distributed::TraceRecorder::Span span(trace, "forward");
        loss = parts_.loss->apply(*parts_.model, micro).sum / divisor;
      }
      parts_.markPhase(StepPhase::kBackward);
      {
        distributed::TraceRecorder::Span span(trace, "backward");
        loss.backward();
      }
      loss_sum += loss.item<double>() * to_global;
    }
    parts_.sync->afterBackward(last);
  }
  return loss_sum;
}

void StepLoop::optimizerStep(int64_t step) {
  distributed::TraceRecorder::Span span(parts_.options.trace, "optimizer");
  if (parts_.config.trainer.grad_clip_norm > 0)
    clipGradNorm(*parts_.flat, parts_.config.trainer.grad_clip_norm);
  parts_.optimizer->step(parts_.schedule->lr(step));
}

void StepLoop::recordStep(int64_t step, const StepOutcome& outcome, double lr) {
  if (step == parts_.start_step) parts_.startupMark("step");
  StepMetrics metrics;
  metrics.samples = outcome.local_samples;
  metrics.global_samples = outcome.samples;
  // The recorder takes this member's mean over its samples: the share of the global mean scaled
  // back (a member with no samples of the step adds nothing).
  metrics.loss = outcome.local_samples > 0 ? outcome.loss * static_cast<double>(outcome.samples) /
                                                 static_cast<double>(outcome.local_samples)
                                           : 0;
  metrics.lr = lr;
  metrics.seconds = outcome.seconds;
  metrics.comm_wait_seconds = std::min(outcome.comm_wait, outcome.seconds);
  parts_.recorder->step(metrics);
}

// In evaluation mode (no dropout) without gradients, then back to training.
Evaluation StepLoop::evaluateAt(int64_t done, int64_t epoch) {
  Evaluation result;
  {
    distributed::TraceRecorder::Span span(parts_.options.trace, "evaluate");
    torch::NoGradGuard no_grad;
    parts_.model->train(false);
    const double start = parts_.now();
    // DiLoCo: the global parameters are the model; the replica's own come back after, however
    // the evaluation ends (a peer's failure in its sums included).
    struct Replica {
      std::vector<torch::Tensor>& params;
      std::vector<torch::Tensor> saved;
      ~Replica() {
        for (size_t i = 0; i < saved.size(); ++i) params[i].detach().copy_(saved[i]);
      }
    } replica{parts_.params, {}};
    if (parts_.diloco) {
      const DiLoCoState state = parts_.diloco->state();
      for (size_t i = 0; i < parts_.params.size(); ++i) {
        replica.saved.push_back(parts_.params[i].detach().clone());
        parts_.params[i].detach().copy_(state.global[i]);
      }
    }
    result = parts_.evaluator->evaluate(*parts_.model);
    result.seconds = parts_.now() - start;
    parts_.model->train(true);
  }
  parts_.recorder->evaluation(result.loss, result.accuracy, result.seconds);
  return result;
}

// After the agreed stop at `done` (its checkpoint is saved or being waited for on rank 0).
void StepLoop::stopAt(int64_t done, RunResult& result) {
  parts_.elastic->waitForAll();  // no rank exits before rank 0's checkpoint is durable
  result.preempted = true;
  result.steps = done;
  result.checkpoint = parts_.checkpoints->pathOf(done);  // recorded once its write is (run())
}

// Rank 0 creates trainer.run_dir and writes the experiment there as config.yaml.
void StepLoop::prepareRunDir() const {
  const std::string& dir = parts_.config.trainer.run_dir;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw std::runtime_error(dir + ": cannot create the run directory: " + error.message());
  std::ofstream yaml(dir + "/config.yaml", std::ios::trunc);
  yaml << configs::toYaml(parts_.config);
  if (!yaml) throw std::runtime_error(dir + "/config.yaml: write failed");
}

// A run that reached its last step: the results, the final parameters, the summary.
void StepLoop::finishRun(const Evaluation& last_eval, double loop_start, RunResult& result) {
  result.test_loss = last_eval.loss;
  result.test_accuracy = last_eval.accuracy;
  result.steps = parts_.total_steps;
  result.epochs = static_cast<double>(parts_.total_steps) /
                  static_cast<double>(parts_.batches->stepsPerEpoch());
  result.seconds = parts_.now() - loop_start;
  parts_.checkpoints->saveFinalWeights(
      *parts_.model);  // done at the last boundary unless nothing trained
  // In place, or with every rank logging, every replica hashes its own, so that one can tell that
  // they are identical.
  if (parts_.env.rank == 0 || parts_.inPlace() || parts_.config.trainer.log_all_ranks) {
    result.parameter_digest = parameterDigest(*parts_.model);
  }
  RunTotals totals;
  totals.parameters = parts_.model->parameterCount();
  totals.parameter_digest = result.parameter_digest;
  parts_.recorder->finish(totals);
}

}  // namespace cumulus::trainer
