#pragma once
// The trainer's insides: trainer.cc builds the model and the step loop's parts from the
// experiment (and restores a checkpoint); training_loop.cc runs the loop over those parts. Not a
// public header: only those two files include it.

#include <torch/torch.h>

#include <map>
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
#include "cumulus/run_directory.h"
#include "cumulus/step_watchdog.h"
#include "data/examples.h"
#include "distributed/flat_parameters.h"
#include "models/model.h"
#include "trainer/batch_shares.h"
#include "trainer/batch_source.h"
#include "trainer/checkpoint_policy.h"
#include "trainer/comm_bytes.h"
#include "trainer/datasets.h"
#include "trainer/evaluator.h"
#include "trainer/loss.h"
#include "trainer/metrics_recorder.h"
#include "trainer/optimizer.h"
#include "trainer/run_checkpoints.h"
#include "trainer/run_records.h"
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

class Trainer::Impl {
 public:
  // Builds everything (trainer.cc); throws what Trainer's constructor documents, before mapping.
  Impl(const configs::Experiment& experiment, const RunEnv& env, std::unique_ptr<GradientSync> sync,
       TrainerOptions options);
  ~Impl();

  RunResult run();  // training_loop.cc
  models::Model& model() { return *model_; }
  int64_t totalSteps() const { return total_steps_; }
  int64_t stepsPerEpoch() const { return batches_->stepsPerEpoch(); }

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

  // Set-up (trainer.cc; its checks of the model against the data: model_checks.h).
  void build();
  void buildModel(const data::Examples& train);
  // The parts that depend on the group's membership (evaluator, recorder, the checkpoints' policy
  // and writer); built once, and again after each in-place re-forming.
  void buildGroupParts();
  // The loop's Elastic: the caller's in place (TrainerOptions::elastic), else one over
  // TrainerOptions::group with the stop agreement TrainerOptions::stop picks. Registers the
  // training state and the membership callbacks.
  void buildElastic();
  void resumeIfAsked();
  bool writes() const { return options_.write_outputs && env_.rank == 0; }
  double now() const;
  void startupMark(const char* phase);

  // The loop (training_loop.cc).
  enum class Boundary { kNext, kStop };
  // The next step and the boundary after it (a re-forming on the way: kNext, from
  // elastic_->step()).
  Boundary stepAndBoundary(double loop_start, Evaluation& eval, RunResult& result);
  // The last step's boundary: DiLoCo's last round, the evaluation, the final weights, the last
  // checkpoint; run again on the re-formed group after a failure until it completes.
  void lastBoundary(Evaluation& eval);
  StepOutcome trainStep(int64_t step);
  // The step watchdog (trainer.step_timeout_seconds), from the first step to the end of run().
  // `joiner`: this launch joined a running group in place (it has no goodput history).
  void beginRecords(bool joiner);
  void startWatchdog();
  void markPhase(StepPhase phase) {
    if (watchdog_) watchdog_->mark(phase);
  }
  double forwardBackward(const StepBatch& batch);
  void optimizerStep(int64_t step);
  void recordStep(int64_t step, const StepOutcome& outcome, double lr, double loop_start);
  Evaluation evaluateAt(int64_t done, int64_t epoch);
  // The training state after step `done` (a checkpoint's, without the residuals).
  Checkpoint snapshot(int64_t done, double lr, bool preempted);
  void stopAt(int64_t done, RunResult& result);
  void prepareRunDir() const;
  void finishRun(const Evaluation& last_eval, double loop_start, RunResult& result);

  // Recovery in place (in_place.cc; docs/recovery.md), through the public Elastic.
  bool inPlace() const { return elastic_->inPlace(); }
  // What a live peer sends a member whose state is behind, and how that member takes it.
  Checkpoint captureState();
  void restoreState(const Checkpoint& state);
  // Elastic's callbacks: before a failure's re-forming, and after any change of membership.
  void failureSeen(const std::string& reason);
  void membershipChanged(const Membership& m);

  const configs::Experiment config_;
  RunEnv env_;  // rank and world size change when the group re-forms in place
  const TrainerOptions options_;
  cumulus::ProcessGroup* group_ =
      nullptr;  // the current membership's group when it has more than one rank; null alone
  // The loop's: options.elastic (the group re-forms in place), or own_elastic_.
  cumulus::Elastic* elastic_ = nullptr;
  std::unique_ptr<cumulus::Elastic> own_elastic_;

  // The model and how it learns.
  std::unique_ptr<models::Model> model_;
  cumulus::PrecisionChoice precision_;  // trainer.precision, chosen for this CPU
  std::shared_ptr<const Loss> loss_;    // loss.name, in precision_
  std::vector<torch::Tensor> params_;
  // params_ and their gradients in the gradient sync's bucket layout; the optimizer steps over it.
  std::shared_ptr<distributed::FlatParameters> flat_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  // trainer.sync diloco: the outer syncs over params_ (<cumulus/diloco.h>; built, started,
  // restored and checkpointed by diloco_training.h); null every step.
  std::unique_ptr<DiLoCo> diloco_;

  // The step loop's parts (trainer.h TrainerOptions).
  std::shared_ptr<BatchSource> batches_;
  std::unique_ptr<BatchShares> shares_;  // the ranks' shares of the global batch (trainer.balance)
  std::unique_ptr<GradientSync> own_sync_;  // without recovery in place
  GradientSync* sync_ = nullptr;            // own_sync_, or in place the Elastic's
  DataParallel* distributed_ = nullptr;     // sync_, when it is one
  std::shared_ptr<Evaluator> evaluator_;
  // The recorder of the current membership, the sinks and goodput account of the launch, and what
  // set-up and the resume found until the records begin.
  RunRecords records_;
  // The checkpoints, the run directory's guards and the residuals for the checkpoints.
  std::unique_ptr<RunCheckpoints> checkpoints_;

  // Where the run stands.
  int64_t total_steps_ = 0;
  int64_t start_step_ = 0;               // completed steps this launch starts after
  int64_t grad_accumulation_ = 1;        // micro-batches per step: the config's, or a resume's
  uint64_t samples_seen_ = 0;            // global samples consumed so far
  std::string train_source_;             // Datasets::train_source, for the dry run's messages
  std::vector<std::string> data_lines_;  // "train data: ...", "test data: ..." (describe())
  std::shared_ptr<const data::Examples> test_data_;  // for the evaluator, rebuilt on re-forming
  int64_t steps_done_ = 0;                           // optimizer steps this rank's state has taken
  bool has_state_ = true;                   // false for a joiner until a peer sent it the state
  SamplerState done_position_;              // the sampler's position after step steps_done_
  int64_t reforms_ = 0;                     // failures this rank re-formed after
  std::unique_ptr<StepWatchdog> watchdog_;  // during run(), unless options_.step_watchdog is off
  CommBytesCounter comm_bytes_;  // StepRecord::comm_bytes_sent over every group of the launch
  bool ran_ = false;
};

}  // namespace cumulus::trainer
