#pragma once
// The trainer's insides, three parts over the parts they share (TrainerParts):
//  - set-up (trainer.cc): Trainer::Impl builds the parts from the experiment and the caller's
//    TrainerOptions, and resumes from a checkpoint;
//  - the step loop (training_loop.cc): StepLoop runs the steps and their boundaries over them;
//  - recovery in place (in_place.cc): InPlaceRecovery is the trainer's side of the public Elastic:
//    the state a live peer sends and a member behind takes, and what is rebuilt after the
//    membership changed.
// Not a public header: only those three files include it. Training thread only.

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "configs/experiment.h"
#include "cumulus/checkpoint.h"
#include "cumulus/data_parallel.h"
#include "cumulus/diloco.h"
#include "cumulus/elastic.h"
#include "cumulus/preemption.h"
#include "cumulus/recorder.h"
#include "cumulus/run_directory.h"
#include "cumulus/step_watchdog.h"
#include "data/examples.h"
#include "distributed/flat_parameters.h"
#include "models/model.h"
#include "trainer/batch_shares.h"
#include "trainer/batch_source.h"
#include "trainer/checkpoint_policy.h"
#include "trainer/datasets.h"
#include "trainer/evaluator.h"
#include "trainer/loss.h"
#include "trainer/optimizer.h"
#include "trainer/run_checkpoints.h"
#include "trainer/schedule.h"
#include "trainer/trainer.h"

namespace cumulus {
class DataParallel;
class ProcessGroup;
}  // namespace cumulus

namespace cumulus::trainer {

// LocalGradientSync, or a DataParallel over `group` when it has more than one rank (trainer.cc).
std::unique_ptr<GradientSync> makeSync(const configs::Experiment& experiment,
                                       cumulus::ProcessGroup* group,
                                       distributed::TraceRecorder* trace);
// "0,2": ranks for a log line (in_place.cc).
std::string rankList(const std::vector<int>& ranks);

// The DataParallel options of comm.* (the gradients already lie in the buckets' layout).
DataParallelOptions syncOptions(const configs::Experiment& experiment,
                                distributed::TraceRecorder* trace);

// How far this rank's training state has come: what a checkpoint and a live peer's state hold
// beside the tensors. The loop moves it at each committed step; a resume or a peer's state sets it.
struct StateProgress {
  int64_t steps_done = 0;         // optimizer steps the state has taken
  SamplerState sampler;           // the sampler's position after them
  uint64_t samples_seen = 0;      // global samples they consumed
  int64_t grad_accumulation = 1;  // micro-batches per step: the config's, or a resume's
};

// What set-up builds and the loop and recovery in place use: the model and how it learns, the
// step loop's parts, the current membership and where the run stands. Trainer::Impl owns it.
struct TrainerParts {
  TrainerParts(const configs::Experiment& experiment, const RunEnv& env, TrainerOptions options);
  ~TrainerParts();

  bool writes() const { return options.write_outputs && env.rank == 0; }
  double now() const;                   // TrainerOptions::clock, else the steady clock
  void startupMark(const char* phase);  // TrainerOptions::startup
  void markPhase(StepPhase phase) {
    if (watchdog) watchdog->mark(phase);
  }
  bool inPlace() const { return elastic->inPlace(); }
  // A line for the records: the recorder's once it exists, kept in `pending` until then (a
  // warning as "warning: ...").
  void note(const std::string& line);
  void warning(const std::string& line);
  // The lines set-up code left in `pending` (it reports into a list), to the recorder once it
  // exists.
  void flushPending();
  // The training state after `done` steps, as that step's checkpoint holds it (without the
  // residuals), in the membership `as`.
  Checkpoint checkpointAt(const RunEnv& as, int64_t done, double lr, bool preempted);

  const configs::Experiment config;
  RunEnv env;  // rank and world size change when the group re-forms in place
  const TrainerOptions options;
  // The current membership's group when it has more than one rank; null alone.
  cumulus::ProcessGroup* group = nullptr;
  // The loop's: options.elastic (the group re-forms in place), or own_elastic.
  cumulus::Elastic* elastic = nullptr;
  std::unique_ptr<cumulus::Elastic> own_elastic;

  // The model and how it learns.
  std::unique_ptr<models::Model> model;
  cumulus::PrecisionChoice precision;  // trainer.precision, chosen for this CPU
  std::shared_ptr<const Loss> loss;    // loss.name, in precision
  std::vector<torch::Tensor> params;
  // params and their gradients in the gradient sync's bucket layout; the optimizer steps over it.
  std::shared_ptr<distributed::FlatParameters> flat;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  // trainer.sync diloco: the outer syncs over params (<cumulus/diloco.h>; built, started,
  // restored and checkpointed by diloco_training.h); null every step.
  std::unique_ptr<DiLoCo> diloco;

  // The step loop's parts (trainer.h TrainerOptions).
  std::shared_ptr<BatchSource> batches;
  std::unique_ptr<BatchShares> shares;  // the ranks' shares of the global batch (trainer.balance)
  std::unique_ptr<GradientSync> own_sync;  // without recovery in place
  GradientSync* sync = nullptr;            // own_sync, or in place the Elastic's
  DataParallel* distributed = nullptr;     // sync, when it is one
  std::shared_ptr<Evaluator> evaluator;
  // The launch's records (<cumulus/recorder.h>, the one every Elastic loop has), from the loop's
  // start on (StepLoop::beginRecords); what set-up and the resume found before it is kept in
  // `pending`, and written first.
  std::unique_ptr<cumulus::Recorder> recorder;
  std::vector<std::string> pending;
  // The checkpoints, the run directory's guards and the residuals for the checkpoints.
  std::unique_ptr<RunCheckpoints> checkpoints;
  std::unique_ptr<StepWatchdog> watchdog;  // during run(), unless options.step_watchdog is off

  // Where the run stands.
  int64_t total_steps = 0;
  int64_t start_step = 0;  // completed steps this launch starts after
  StateProgress progress;
  std::string train_source;             // Datasets::train_source, for the dry run's messages
  std::vector<std::string> data_lines;  // "train data: ...", "test data: ..." (describe())
  std::shared_ptr<const data::Examples> test_data;  // for the evaluator, rebuilt on re-forming
};

// Recovery in place (in_place.cc; docs/recovery.md): Elastic's state and membership callbacks.
class InPlaceRecovery {
 public:
  // `rebuild_group_parts`: set-up's rebuild of the parts that know the rank and the world size.
  InPlaceRecovery(TrainerParts& parts, std::function<void()> rebuild_group_parts)
      : parts_(parts), rebuild_group_parts_(std::move(rebuild_group_parts)) {}

  // Registers the callbacks below, and the config the state is checked against, with the
  // parts' Elastic.
  void connect();
  int64_t reforms() const { return reforms_; }  // failures this rank re-formed after

 private:
  // What a live peer sends a member whose state is behind, and how that member takes it.
  Checkpoint captureState();
  void restoreState(const Checkpoint& state);
  // Before a failure's re-forming, and after any change of membership.
  void failureSeen(const std::string& reason);
  void membershipChanged(const Membership& m);

  TrainerParts& parts_;
  std::function<void()> rebuild_group_parts_;
  int64_t reforms_ = 0;
};

// The step loop (training_loop.cc): for each step, this rank's batch, forward and backward, the
// gradient sync, the optimizer step; then the step's boundary.
class StepLoop {
 public:
  StepLoop(TrainerParts& parts, const InPlaceRecovery& recovery)
      : parts_(parts), recovery_(recovery) {}

  RunResult run();

 private:
  // What one step did, for the records.
  struct StepOutcome {
    double loss = 0;            // this rank's share of the global mean loss
    int64_t epoch = 0;          // 1-based, for people
    int64_t samples = 0;        // the global batch
    int64_t local_samples = 0;  // this rank's share of it
    double seconds = 0;
    double comm_wait = 0;  // of `seconds`, blocked in GradientSync::finish()
  };
  enum class Boundary { kNext, kStop };

  // Admits a joiner and runs the group's first collectives; false: the group had finished.
  bool start();
  // The next step and the boundary after it (a re-forming on the way: kNext, from
  // elastic->step()).
  Boundary stepAndBoundary(Evaluation& eval, RunResult& result);
  // The last step's boundary: DiLoCo's last round, the evaluation, the final weights, the last
  // checkpoint; run again on the re-formed group after a failure until it completes.
  void lastBoundary(Evaluation& eval);
  StepOutcome trainStep(int64_t step);
  void beginRecords();
  // The step watchdog (trainer.step_timeout_seconds), from the first step to the end of run().
  void startWatchdog();
  double forwardBackward(const StepBatch& batch);
  void optimizerStep(int64_t step);
  void recordStep(int64_t step, const StepOutcome& outcome, double lr);
  Evaluation evaluateAt(int64_t done, int64_t epoch);
  int64_t epochOfStep(int64_t done) const;  // the epoch step `done` was in, 1-based
  void stopAt(int64_t done, RunResult& result);
  void prepareRunDir() const;
  void finishRun(const Evaluation& last_eval, double loop_start, RunResult& result);

  TrainerParts& parts_;
  const InPlaceRecovery& recovery_;
  bool ran_ = false;
};

class Trainer::Impl {
 public:
  // Builds everything (trainer.cc); throws what Trainer's constructor documents, before mapping.
  Impl(const configs::Experiment& experiment, const RunEnv& env, std::unique_ptr<GradientSync> sync,
       TrainerOptions options);
  ~Impl();

  RunResult run() { return loop_.run(); }
  models::Model& model() { return *parts_.model; }
  int64_t totalSteps() const { return parts_.total_steps; }
  int64_t stepsPerEpoch() const { return parts_.batches->stepsPerEpoch(); }

 private:
  // Set-up (trainer.cc; its checks of the model against the data: model_checks.h).
  void takeGroup(std::unique_ptr<GradientSync> sync);
  void build();
  void buildModel(const data::Examples& train);
  void attachSync();
  // The parts that depend on the group's membership (evaluator, recorder, the checkpoints' policy
  // and writer); built once, and again after each in-place re-forming.
  void buildGroupParts();
  // The loop's Elastic: the caller's in place (TrainerOptions::elastic), else one over
  // TrainerOptions::group with the stop agreement TrainerOptions::stop picks.
  void buildElastic();
  void resumeIfAsked();

  TrainerParts parts_;
  InPlaceRecovery recovery_;
  StepLoop loop_;
};

}  // namespace cumulus::trainer
