// The step loop: for each step, this rank's batch, forward and backward, the gradient sync, the
// optimizer step; then the records, an evaluation when due, a checkpoint when the policy says so,
// and the ranks' agreement on whether to go on. The parts are the Impl's (trainer_impl.h).
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <utility>

#include "configs/parse.h"
#include "cumulus/checkpoint.h"
#include "cumulus/process_group.h"
#include "distributed/trace.h"
#include "trainer/diloco_training.h"
#include "trainer/divergence.h"
#include "trainer/goodput.h"
#include "trainer/loss.h"
#include "trainer/rank_reduce.h"
#include "trainer/startup_profile.h"
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

RunResult Trainer::Impl::run() {
  if (ran_) throw std::logic_error("Trainer::run() may be called once");
  ran_ = true;
  // The run directory is this job's until run() ends, however it ends: the next run in it, in
  // this process too, takes it then.
  struct ReleaseRunDir {
    Impl& impl;
    ~ReleaseRunDir() { impl.checkpoints_->releaseRunDir(); }
  } release{*this};
  const bool joiner = elastic_->joining();
  // A replacement waits here to be admitted and takes the state from a live peer. A launch member
  // runs the group's first collectives here (DiLoCo's start among them), recovering in place
  // from a peer lost during them.
  bool admitted = false;
  try {
    admitted = elastic_->start(start_step_, [this] {
      if (diloco_ && start_step_ == 0 && group_ != nullptr) {
        startDiloco(*diloco_, *group_, *model_, params_);
      }
    });
  } catch (const std::invalid_argument& e) {
    // The ranks resumed from different checkpoints, or built different models.
    throw SetupError(std::string(e.what()) + " (checkpoints in " + checkpoints_->dir() + ")");
  }
  if (!admitted) {
    if (options_.console != nullptr) {
      *options_.console << "the group finished training before this member was admitted; "
                           "nothing to do"
                        << std::endl;
    }
    return RunResult{};
  }
  if (joiner) {
    start_step_ = steps_done_;  // the state a live peer sent (its error feedback starts at zero)
  } else {
    checkpoints_->restoreResiduals(records_.pending());
    startupMark("broadcast");
  }
  if (writes()) prepareRunDir();
  beginRecords(joiner);
  startWatchdog();
  // However run() ends, nothing is watched after it.
  struct StopWatching {
    std::unique_ptr<StepWatchdog>& watchdog;
    ~StopWatching() { watchdog.reset(); }
  } stop_watching{watchdog_};

  RunResult result;
  result.first_step = start_step_;
  result.precision = precision_.precision;
  const double start = now();
  Evaluation eval;
  while (elastic_->step() < total_steps_) {
    if (stepAndBoundary(start, eval, result) != Boundary::kNext) break;
  }
  // The last boundary, unless the run stopped before it or resumed with nothing left to train.
  if (!result.preempted && start_step_ < total_steps_) lastBoundary(eval);
  result.reforms = reforms_;
  watchdog_.reset();
  records_.recorder().stepsEnded();
  if (start_step_ >= total_steps_) {
    // Resumed from the last step's checkpoint: nothing to train, but the results are still the
    // model's, not zeros.
    records_.recorder().note("the run was already complete at step " +
                             std::to_string(total_steps_) +
                             ": evaluating the checkpoint's model only");
    eval = evaluateAt(total_steps_, batches_->position().epoch + 1);
  }
  checkpoints_->finish();
  if (!result.preempted) elastic_->finish();
  const int64_t ran = (result.preempted ? result.steps : total_steps_) - start_step_;
  records_.recorder().trained(start_step_ + ran, ran, now() - start);
  if (result.preempted) {
    result.seconds = now() - start;
    return result;
  }
  finishRun(eval, start, result);
  return result;
}

// The records' first lines: the model, the precision, what the run reads, what the resume found;
// then the batch shares the launch starts with.
void Trainer::Impl::beginRecords(bool joiner) {
  // A launch that resumed from a checkpoint takes over the goodput account of the launches before
  // it; a joiner's launch starts its own.
  GoodputHistory history;
  if (writes() && start_step_ > 0 && !joiner) {
    history = readGoodputHistory(config_.trainer.run_dir + "/metrics.jsonl", start_step_);
  }
  RunStart begin{model_->summary(), data_lines_, start_step_, total_steps_,
                 batches_->stepsPerEpoch()};
  begin.precision = precisionName(precision_.precision);
  begin.precision_requested = precisionName(precision_.requested);
  begin.precision_reason = precision_.reason;
  begin.precision_warning = precision_.warning;
  records_.begin(std::move(begin), launchExecTime(), history);
  shares_->record("start", start_step_, env_.world_size, records_.recorder());
}

void Trainer::Impl::startWatchdog() {
  if (!options_.step_watchdog) return;
  StepWatchdogOptions options;
  options.timeout_seconds = config_.trainer.step_timeout_seconds;
  watchdog_ = std::make_unique<StepWatchdog>(std::move(options));
  watchdog_->start();
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
// then re-forms the group and the loop goes on from elastic_->step().
Trainer::Impl::Boundary Trainer::Impl::stepAndBoundary(double loop_start, Evaluation& eval,
                                                       RunResult& result) {
  std::optional<StepOutcome> step;
  int64_t s = 0;
  double lr = 0;
  elastic_->train([&] {
    s = elastic_->step();  // again after a re-forming: another member may have been ahead
    lr = schedule_->lr(s);
    step = trainStep(s);
  });
  // A member that had completed the step sent its state: nothing of the step ran here to record.
  if (!step || elastic_->step() != s + 1) return Boundary::kNext;
  result.step_losses.push_back(step->loss);
  records_.afterStep();
  // The step's record sums the loss over the ranks: a collective, so it is boundary work too.
  const auto record = [&] { recordStep(s, *step, lr, loop_start); };

  const int64_t done = s + 1;
  if (done == total_steps_) {
    // The last step's record; the rest of its boundary is lastBoundary's, which no failure skips.
    elastic_->atBoundary(record);
    return Boundary::kNext;
  }
  const bool boundary_done = elastic_->atBoundary([&] {
    record();
    // Before the checkpoints below, which keep the shares it sets.
    shares_->atBoundary(done, group_, grad_accumulation_, records_.recorder());
    if (evaluator_->due(done)) eval = evaluateAt(done, step->epoch);
    checkpoints_->save(checkpoints_->dueAtStepEnd(done, false), done, lr);
  });
  if (!boundary_done) return Boundary::kNext;
  const ElasticAction action = elastic_->boundary();
  if (action == ElasticAction::kLeave) {
    result.preempted = true;
    result.left = true;
    result.steps = done;
    records_.recorder().warning(
        "preempted at step " + std::to_string(done) + ": rank " + std::to_string(env_.rank) +
        " leaves the group, which trains on with " +
        std::to_string(env_.world_size - static_cast<int64_t>(elastic_->leaving().size())) +
        " worker(s); no checkpoint needed");
    return Boundary::kStop;
  }
  if (action == ElasticAction::kStop && !elastic_->leaving().empty()) {
    records_.recorder().note("preemption notice for rank(s) " + rankList(elastic_->leaving()) +
                             ": too few workers would remain, so every rank checkpoints and stops");
  }
  if (action == ElasticAction::kCheckpoint) {
    records_.recorder().note("checkpoint requested at step " + std::to_string(done) +
                             "; training goes on");
  }
  const StepAction agreed = action == ElasticAction::kCheckpoint ? StepAction::kCheckpoint
                            : action == ElasticAction::kStop     ? StepAction::kStop
                                                                 : StepAction::kContinue;
  if (!elastic_->atBoundary(
          [&] { checkpoints_->save(checkpoints_->dueAfterAgreement(done, agreed), done, lr); })) {
    return Boundary::kNext;
  }
  if (agreed == StepAction::kStop && elastic_->atBoundary([&] { stopAt(done, result); })) {
    return Boundary::kStop;
  }
  return Boundary::kNext;
}

// After the last step, on every member of whatever group is left: DiLoCo's last round, the final
// evaluation, the final weights and the last checkpoint. A peer's failure part of the way runs it
// again, whole, on the re-formed group (Elastic::atEnd): there is no next step to move on to.
void Trainer::Impl::lastBoundary(Evaluation& eval) {
  const int64_t done = total_steps_;
  const double lr = schedule_->lr(done - 1);
  elastic_->atEnd([&] {
    if (diloco_) diloco_->syncAll(group_);  // agrees first where a failure cut it short
    eval = evaluateAt(done, batches_->position().epoch + 1);  // 1-based, as a step's record
    checkpoints_->saveFinalWeights(*model_);  // first: the weights survive a failed last one
    checkpoints_->save(checkpoints_->dueAtStepEnd(done, true), done, lr);
  });
}

// One optimizer step; its loss is this rank's share of the global mean (at world size 1 the mean
// loss over the global batch).
Trainer::Impl::StepOutcome Trainer::Impl::trainStep(int64_t step) {
  const double start = now();
  if (watchdog_) watchdog_->beginStep(step + 1, env_.rank, StepPhase::kData);
  StepBatch batch;
  {
    // Gathering the rows: inside "forward" before the BatchSource split it out.
    distributed::TraceRecorder::Span span(options_.trace, "batch");
    batch = batches_->next(step, grad_accumulation_);
  }
  if (batch.micro_batches.empty()) {
    throw TrainError("the batch source gave no micro-batch for step " + std::to_string(step + 1));
  }
  torch::manual_seed(stepSeed(config_.trainer.seed, batch.epoch, step, env_.rank));
  MembersDrew drew(diloco_ ? group_ : nullptr, step, env_.world_size);
  // DiLoCo: the fragment due before this step is synced (with overlap, started) before anything
  // of the step changes the state, so that a failed sync leaves the step to redo.
  const double outer_before = diloco_ ? diloco_->stats().wait_seconds : 0;
  if (diloco_) {
    markPhase(StepPhase::kSync);
    distributed::TraceRecorder::Span span(options_.trace, "outer sync");
    diloco_->beginStep(step, group_);
  }
  // In place, one zero_() per bucket: the gradients keep their flat storage for the whole run.
  flat_->zeroGrads();
  StepOutcome outcome;
  outcome.loss = forwardBackward(batch);
  const double wait_start = now();
  int64_t samples = 0;
  for (const data::Batch& micro : batch.micro_batches) {
    if (micro.targets.defined()) samples += micro.targets.size(0);
  }
  // The compute rate leaves out the time blocked in an outer sync before the forward.
  const double outer_waited = diloco_ ? diloco_->stats().wait_seconds - outer_before : 0;
  shares_->measure(samples, wait_start - start - outer_waited);
  markPhase(StepPhase::kSync);
  {
    distributed::TraceRecorder::Span span(distributed_ != nullptr ? options_.trace : nullptr,
                                          "comm wait");
    sync_->finish();
  }
  if (diloco_) {
    distributed::TraceRecorder::Span span(options_.trace, "outer sync");
    try {
      drew.wait();
    } catch (...) {
      diloco_->cancel();  // the fragment beginStep started: the step is redone from its start
      throw;
    }
    diloco_->endStep();  // with overlap: the fragment lands before the inner step
  }
  outcome.comm_wait = now() - wait_start + outer_waited;  // endStep's wait is in the first part
  markPhase(StepPhase::kOptimizer);
  optimizerStep(step);
  if (watchdog_) watchdog_->endStep();
  // Committed: this rank's state has taken the step (an in-place re-forming starts from here).
  steps_done_ = step + 1;
  done_position_ = batches_->position();
  samples_seen_ += static_cast<uint64_t>(batch.global_samples);
  if (!std::isfinite(outcome.loss)) {
    throw TrainError(divergenceMessage(config_, step + 1, outcome.loss, diloco_.get()));
  }
  outcome.epoch = batch.epoch + 1;
  outcome.samples = batch.global_samples;
  outcome.local_samples = samples;
  outcome.seconds = now() - start;
  return outcome;
}

// Each micro-batch's loss, summed over its samples (trainer/loss.h), is divided by the whole
// global batch, so the gradients the sync
// adds up are those of the global mean (data_parallel.h). A micro-batch with no rows on this rank
// runs no backward but still tells the sync.
double Trainer::Impl::forwardBackward(const StepBatch& batch) {
  distributed::TraceRecorder* trace = options_.trace;
  const size_t k = batch.micro_batches.size();
  double loss_sum = 0;
  // DiLoCo: each replica steps on the mean over its own share; the record keeps the share of the
  // global mean, so that the ranks' losses still add up to it.
  double divisor = static_cast<double>(batch.global_samples);
  if (diloco_) {
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
    sync_->beforeBackward(last);
    if (micro.targets.defined() && micro.targets.size(0) > 0) {
      torch::Tensor loss;
      markPhase(StepPhase::kForward);
      {
        distributed::TraceRecorder::Span span(trace, "forward");
        loss = loss_->apply(*model_, micro).sum / divisor;
      }
      markPhase(StepPhase::kBackward);
      {
        distributed::TraceRecorder::Span span(trace, "backward");
        loss.backward();
      }
      loss_sum += loss.item<double>() * to_global;
    }
    sync_->afterBackward(last);
  }
  return loss_sum;
}

void Trainer::Impl::optimizerStep(int64_t step) {
  distributed::TraceRecorder::Span span(options_.trace, "optimizer");
  if (config_.trainer.grad_clip_norm > 0) clipGradNorm(*flat_, config_.trainer.grad_clip_norm);
  optimizer_->step(schedule_->lr(step));
}

void Trainer::Impl::recordStep(int64_t step, const StepOutcome& outcome, double lr,
                               double loop_start) {
  const int64_t done = step + 1;
  if (step == start_step_) {
    startupMark("step");
    records_.recorder().firstStep(done, options_.startup);
  }
  StepRecord record;
  record.step = done;
  record.epoch = outcome.epoch;
  record.loss = outcome.loss;
  record.lr = lr;
  record.seconds = outcome.seconds;
  record.comm_wait_seconds = outcome.comm_wait;
  record.samples = outcome.samples;
  record.local_samples = outcome.local_samples;
  record.elapsed_seconds = now() - loop_start;
  record.comm_bytes_sent = comm_bytes_.total(group_);
  if (diloco_) {
    record.outer_rounds = diloco_->stats().rounds;
    record.outer_wait_seconds = diloco_->stats().wait_seconds;
  }
  records_.recorder().step(record);
}

// In evaluation mode (no dropout) without gradients, then back to training.
Evaluation Trainer::Impl::evaluateAt(int64_t done, int64_t epoch) {
  Evaluation result;
  {
    distributed::TraceRecorder::Span span(options_.trace, "evaluate");
    torch::NoGradGuard no_grad;
    model_->train(false);
    const double start = now();
    // DiLoCo: the global parameters are the model; the replica's own come back after, however
    // the evaluation ends (a peer's failure in its sums included).
    struct Replica {
      std::vector<torch::Tensor>& params;
      std::vector<torch::Tensor> saved;
      ~Replica() {
        for (size_t i = 0; i < saved.size(); ++i) params[i].detach().copy_(saved[i]);
      }
    } replica{params_, {}};
    if (diloco_) {
      const DiLoCoState state = diloco_->state();
      for (size_t i = 0; i < params_.size(); ++i) {
        replica.saved.push_back(params_[i].detach().clone());
        params_[i].detach().copy_(state.global[i]);
      }
    }
    result = evaluator_->evaluate(*model_);
    result.seconds = now() - start;
    model_->train(true);
  }
  records_.recorder().evaluation(done, epoch, result);
  return result;
}

Checkpoint Trainer::Impl::snapshot(int64_t done, double lr, bool preempted) {
  TrainingPosition position;
  position.steps_done = done;
  position.sampler = done == steps_done_ ? done_position_ : batches_->position();
  position.samples_seen = samples_seen_;
  position.learning_rate = lr;
  position.preempted = preempted;
  position.grad_accumulation = grad_accumulation_;
  position.batch_shares = shares_->current();
  position.precision = precisionName(precision_.precision);
  Checkpoint checkpoint = captureCheckpoint(*model_, *optimizer_, config_, env_, position);
  if (diloco_) addDiloco(checkpoint, *diloco_, *model_);
  return checkpoint;
}

// After the agreed stop at `done` (its checkpoint is saved or being waited for on rank 0).
void Trainer::Impl::stopAt(int64_t done, RunResult& result) {
  elastic_->waitForAll();  // no rank exits before rank 0's checkpoint is durable
  result.preempted = true;
  result.steps = done;
  result.checkpoint = checkpoints_->pathOf(done);
  records_.recorder().preempted(done, result.checkpoint);
}

// Rank 0 creates trainer.run_dir and writes the experiment there as config.yaml.
void Trainer::Impl::prepareRunDir() const {
  const std::string& dir = config_.trainer.run_dir;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw std::runtime_error(dir + ": cannot create the run directory: " + error.message());
  std::ofstream yaml(dir + "/config.yaml", std::ios::trunc);
  yaml << configs::toYaml(config_);
  if (!yaml) throw std::runtime_error(dir + "/config.yaml: write failed");
}

// A run that reached its last step: the results, the final parameters, the summary.
void Trainer::Impl::finishRun(const Evaluation& last_eval, double loop_start, RunResult& result) {
  result.test_loss = last_eval.loss;
  result.test_accuracy = last_eval.accuracy;
  result.steps = total_steps_;
  result.epochs =
      static_cast<double>(total_steps_) / static_cast<double>(batches_->stepsPerEpoch());
  result.seconds = now() - loop_start;
  checkpoints_->saveFinalWeights(*model_);  // done at the last boundary unless nothing trained
  // In place, or with every rank logging, every replica hashes its own, so that one can tell that
  // they are identical.
  if (env_.rank == 0 || inPlace() || config_.trainer.log_all_ranks) {
    result.parameter_digest = parameterDigest(*model_);
  }
  RunSummary summary;
  summary.steps = result.steps;
  summary.epochs = result.epochs;
  summary.test = last_eval;
  summary.wall_seconds = result.seconds;
  summary.parameters = model_->parameterCount();
  summary.parameter_digest = result.parameter_digest;
  summary.comm_bytes_sent = comm_bytes_.total(group_);
  if (diloco_) {
    summary.outer_rounds = diloco_->stats().rounds;
    summary.outer_wait_seconds = diloco_->stats().wait_seconds;
  }
  records_.recorder().finished(summary);
}

}  // namespace cumulus::trainer
