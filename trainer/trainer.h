#pragma once
// The training loop of one worker (docs/design.md "A step"). LibTorch stays behind the pimpl so
// that cumulus-train's main and other light callers compile without it.
//
// What run() does: a step loop over parts (each in its own header, each replaceable through
// TrainerOptions):
//   BatchSource (batch_source.h)       this rank's micro-batches of each step
//   GradientSync (data_parallel.h)     the gradient sum over ranks
//   MetricsRecorder (metrics_recorder.h)  console lines and metrics.jsonl
//   Evaluator (evaluator.h)            the test loss and accuracy
//   CheckpointPolicy (checkpoint_policy.h)  when this rank checkpoints
//   StopAgreement (preemption.h)       whether the ranks go on, checkpoint, or stop
// In order:
//   1. Rank 0 creates trainer.run_dir and writes config.yaml (configs::toYaml) there.
//   2. For each optimizer step s = 0 .. totalSteps()-1: takes the step's micro-batches from the
//      BatchSource (by default the sampler's global batch, this rank's slice localIndices split
//      into trainer.grad_accumulation contiguous parts), reseeds torch's default generator from
//      (seed, epoch, s, rank) so dropout is a function of the position in training, and runs
//      forward and backward on each with loss = the experiment's loss summed over the samples
//      (loss.h) / |global batch| (see data_parallel.h for why). Then GradientSync::finish(),
//      clipping to trainer.grad_clip_norm if > 0, and the optimizer step at LrSchedule::lr(s). With
//      a ProcessGroup (world size > 1) the gradients are summed across ranks by the public
//      DataParallel (data_parallel.h), overlapped with backward; rank 0's parameters
//      and buffers are broadcast before the first step so every replica starts identical.
//   3. Evaluates when the Evaluator says so (by default every eval.every_steps steps, or at each
//      epoch's end if that is 0) and after the last step. In a group each rank evaluates its
//      contiguous slice of the test split and the sums are all-reduced, so every rank reports the
//      single-process accuracy.
//   4. At each step boundary: checkpoints as the CheckpointPolicy decides (by default rank 0, when
//      checkpoint.every_steps / every_seconds say so, and after the last step whenever either is
//      set; a deep copy at the boundary, written in the background when checkpoint.async); then,
//      before the last step, the StopAgreement settles whether any rank got a preemption notice
//      (preemption.h: one MAX all-reduce). If so they stop after that same step: rank 0 writes a
//      blocking checkpoint, every rank waits for it, prints "preempted at step S, checkpoint
//      PATH", and run() returns with preempted set (cumulus-train exits 75). A run started with a
//      resume (TrainerOptions::resume) first restores the checkpoint (resume.h) and continues
//      from its step: with the same world size the final parameters are bit-identical to a run
//      that never stopped; with another, the sampler re-shards the same global batches.
//      Console lines for tools (cumulus-spot reads them): "first step S completed",
//      "checkpoint step S: PATH (stall X ms, ...)", "trained K steps in T s",
//      "final parameters sha256 HEX" (rank 0, at the end).
//   5. Rank 0 writes metrics.jsonl (see metrics.h; a train record at step 1 and every
//      trainer.log_every_steps steps, averaging the steps since the previous record) and the final
//      parameters and buffers as model_state_dict.pt (see state_dict.h). Train records carry
//      step_time_ms split into compute_ms and comm_wait_ms (time blocked in
//      GradientSync::finish(), waiting for the gradient all-reduce).
// totalSteps() = epochs * steps per epoch, capped by trainer.max_steps when that is > 0.
//
// Determinism: torch is seeded with trainer.seed just before the model is built, and nothing else
// draws from hidden state, so the same config, world size and thread count give bit-identical
// parameters.
//
// Errors: construction throws SetupError for anything the user must fix before the run can start
// (a dataset file, an unknown model, optimizer or schedule, an out-of-range hyper-parameter, a
// TorchScript model LibTorch rejects), with the original message. A start-up dry run passes one
// training sample through the model and the loss (in evaluation mode, without gradients) and,
// for token data, windows holding each stream's smallest and largest token id: a failure is a
// SetupError naming the model, the file and the reason. run() throws TrainError if the
// loss becomes non-finite or LibTorch fails mid-run, and std::runtime_error naming the path if an
// output cannot be written. A step that makes no progress for trainer.step_timeout_seconds cannot
// throw (its thread is stuck): the step watchdog ends the process with exit 2 instead
// (TrainerOptions::step_watchdog). Not thread-safe.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "configs/experiment.h"
#include "cumulus/errors.h"
#include "cumulus/precision.h"
#include "trainer/resume.h"
#include "trainer/run_env.h"

namespace cumulus {
class Elastic;        // <cumulus/elastic.h>
class GradientSync;   // <cumulus/data_parallel.h>
class ProcessGroup;   // <cumulus/process_group.h>
struct GroupOptions;  // <cumulus/process_group.h>
class StopAgreement;  // <cumulus/preemption.h>
}  // namespace cumulus

namespace cumulus::models {
class Model;
}
namespace cumulus::distributed {
class TraceRecorder;
}

namespace cumulus::metrics {
class MetricsRecorder;
class StartupProfile;
}  // namespace cumulus::metrics
namespace cumulus::trainer {

class BatchSource;
class CheckpointPolicy;
class Evaluator;

// How a caller picks one of the step loop's parts (TrainerOptions): called once while the Trainer
// is built, with the part the Trainer made from the experiment and options, it returns the part to
// use — that same one, a wrapper around it, or one of the caller's own (the default is then
// dropped; defaults do nothing before run()). It must not return null (SetupError). An empty
// PartChoice keeps the default.
template <typename Part>
using PartChoice = std::function<std::shared_ptr<Part>(std::shared_ptr<Part> standard)>;

// A PartChoice that answers `part`, which the caller may hold on to (to notify a StopAgreement
// from another thread, say).
template <typename Part>
PartChoice<Part> usePart(std::shared_ptr<Part> part) {
  return [part](std::shared_ptr<Part>) { return part; };
}

class SetupError : public cumulus::UserError {
 public:
  using cumulus::UserError::UserError;
};

// The loss diverged or the model's code failed mid-run: a retry repeats it (exit 2).
class TrainError : public PermanentError {
 public:
  using PermanentError::PermanentError;
};

struct TrainerOptions {
  std::ostream* console = nullptr;  // progress and results; nullptr: silent
  bool live_progress = false;       // redraw one status line with '\r' (a terminal)
  bool write_outputs = true;        // run_dir files (rank 0 only in any case)
  std::function<double()> clock;    // monotonic seconds; empty: std::chrono::steady_clock
  // This rank's group (<cumulus/process_group.h>; not owned, outlives the Trainer). With more than
  // one rank the trainer synchronizes gradients with a DataParallel over it (the comm section of
  // the config) and shards evaluation. Null, or a group of one: a world of one.
  cumulus::ProcessGroup* group = nullptr;
  // launch.recovery: in_place (<cumulus/elastic.h>; not owned; connectInPlace makes it): the group
  // re-forms without a restart after a failure, a notice or a joiner. `group` must then be
  // &elastic->group(); the gradient sync is the Elastic's (a sync given to the constructor is not
  // used) and so is the stop agreement (`stop` must be empty: wrap it with ElasticOptions::stop).
  // The Trainer registers its state and callbacks with it; one Trainer per Elastic.
  cumulus::Elastic* elastic = nullptr;
  // Records forward, backward, the comm wait, each bucket's all-reduce, the optimizer step and
  // evaluation as Chrome trace events (trace.h); not owned, null: no tracing.
  distributed::TraceRecorder* trace = nullptr;
  // Checkpoints and preemption (trainer/resume.h, <cumulus/preemption.h>).
  // kAuto: the newest valid checkpoint in checkpoint.dir (default <run_dir>/checkpoints), if
  // any; kNone; or kPath, a checkpoint directory (--resume, read by ResumeMode::parse). Unset:
  // auto when started by cumulus-run (CUMULUS_RUN_ID set), none otherwise. A checkpoint that
  // cannot be resumed is a SetupError.
  std::optional<ResumeMode> resume;
  bool allow_config_change = false;  // resume even if semantic config keys changed
  // When the checkpoint directory holds another experiment's checkpoints (otherExperimentChanges,
  // resume.h): remove them and start from step 0. Without it such a start is an
  // ExperimentMismatch (exit 2); a resume of the same experiment is not affected.
  bool overwrite = false;
  // Notice -> forced exit 75, even if the checkpoint write hangs; <= 0: no watchdog.
  double preemption_grace = kDefaultPreemptionGraceSeconds;
  // Count a SIGTERM (<cumulus/preemption.h> installSigtermHandler, done by the caller) as the
  // preemption notice, and a SIGUSR1 (installCheckpointSignalHandler) as a request to checkpoint
  // and go on. Without it only the other ranks' agreement can stop this one or make it save.
  bool watch_sigterm = false;
  // trainer.step_timeout_seconds: a step phase (data, forward, backward, sync, optimizer) with no
  // progress for that long ends the process with exit 2 (<cumulus/step_watchdog.h>). false: no
  // watchdog (a caller that must never _exit, or that watches its own way).
  bool step_watchdog = true;
  // Marks each start-up phase (data, model, resume, broadcast, step) and prints the summary with
  // the first step; not owned, null: no profile.
  metrics::StartupProfile* startup = nullptr;
  // The CPU that trainer.precision auto decides from (<cumulus/precision.h>); unset: this one,
  // CpuFeatures::detect().
  std::optional<cumulus::CpuFeatures> cpu;
  // The step loop's parts (see the top of this file); empty: the defaults. The Trainer loads the
  // experiment's data in any case (the built-in models are sized from it).
  PartChoice<BatchSource> batches;                 // SamplerBatchSource over the training split
  PartChoice<Evaluator> evaluator;                 // makeTestSetEvaluator over the test split
  PartChoice<metrics::MetricsRecorder> metrics;    // ProgressMetricsRecorder on `console`
  PartChoice<CheckpointPolicy> checkpoint_policy;  // ScheduledCheckpointPolicy (checkpoint.*)
  PartChoice<StopAgreement> stop;                  // PreemptionWatcher over the group
};

struct RunResult {
  double test_loss = 0;                 // mean per-sample loss (a language model: nats per token)
  std::optional<double> test_accuracy;  // unset where the loss has none (mse, module)
  int64_t steps = 0;
  double epochs = 0;                // steps / steps per epoch
  double seconds = 0;               // wall time of run(), evaluations included
  std::vector<double> step_losses;  // this rank's training loss of each step run here
  int64_t first_step = 0;           // completed steps restored from a checkpoint
  bool preempted = false;           // stopped at an agreed step: exit 75 and resume later
  std::string checkpoint;           // preempted: the checkpoint of the stop step
  bool left = false;                // preempted in place: left the group, which trains on
  int64_t reforms = 0;              // in place: epochs this rank went through after its first
  std::string parameter_digest;     // rank 0, finished runs: parameterDigest of the model
  cumulus::Precision precision = cumulus::Precision::kFp32;  // what it trained in (fp32, bf16)
};

// When the launcher asks for recovery in place (CUMULUS_RECOVERY=in_place, even for a group of
// one: it may grow), joins its group as the Elastic a Trainer trains on, with comm.* for its
// gradient sync, `trace` for its buckets and options' preemption settings; sets options.elastic
// and options.group, and says so on options.console ("rank R of N: connected (…)", or "member ID:
// joining the running group"). Null otherwise. Outlives the Trainer. Throws what Elastic's
// constructor throws.
std::shared_ptr<cumulus::Elastic> connectInPlace(const configs::Experiment& experiment,
                                                 const cumulus::GroupOptions& group,
                                                 distributed::TraceRecorder* trace,
                                                 TrainerOptions& options);

class Trainer {
 public:
  // LocalGradientSync, or a DataParallel over options.group when it has more than one rank. Builds
  // the model and every part, and restores the checkpoint TrainerOptions::resume names.
  Trainer(const configs::Experiment& experiment, const RunEnv& env, TrainerOptions options);
  // `sync` must not be null.
  Trainer(const configs::Experiment& experiment, const RunEnv& env,
          std::unique_ptr<GradientSync> sync, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  int64_t totalSteps() const;
  int64_t stepsPerEpoch() const;
  // Trains to the end (blocks). Once per Trainer: a second call throws std::logic_error.
  RunResult run();
  // The model, trained once run() has returned.
  models::Model& model();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus::trainer
