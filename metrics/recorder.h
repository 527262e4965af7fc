#pragma once
// MetricsRecorder: the step loop's part that tells people and programs how the run goes — the
// console lines (progress.h) and the metrics.jsonl records (metrics.h). The loop reports events;
// the recorder decides what to print and write. No LibTorch here.
//
// Contract with the step loop (trainer.h), every rank, in this order:
//   begin(); then per step: firstStep() (the launch's first step only), step(), evaluation() when
//   one ran, checkpoint()/note()/warning() as they happen, preempted() at an agreed stop; then
//   stepsEnded(), checkpoint() for writes that finished late, trained(); and finished() when the
//   run completed (not after a stop). step() may be a collective (every rank calls it for every
//   step). Training thread only. Errors writing a file are std::runtime_error naming the path.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cumulus/process_group.h"

#include "metrics/evaluation.h"

namespace cumulus::metrics {

class GoodputAccount;
class MetricsLog;
class Progress;
class StartupProfile;

// Another reader of what the recorder says, besides metrics.jsonl: TensorBoard event files
// (tensorboard.h), the job's live endpoint (metrics_publisher.h). Called on the training thread;
// a sink that may block (a network) hands the work to a thread of its own.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // Every record the writing rank writes to metrics.jsonl, as written (with "time").
  virtual void record(const nlohmann::ordered_json& record) = 0;
  // This rank's own status at each train record, on every rank: {"rank", "step", "epoch",
  // "samples_per_sec" (its share of the batch over the step time), "samples", "step_time_ms",
  // "compute_ms", "comm_wait_ms", "loss" (the job's, as in the train record), "goodput" (the
  // split, goodput.h), "time"}.
  virtual void rankStatus(const nlohmann::ordered_json& /*status*/) {}
  // Whether rankStatus() does anything: the recorder builds no status for sinks that do not.
  virtual bool takesStatus() const { return true; }
};

struct RunStart {
  RunStart() = default;
  RunStart(std::string model, std::vector<std::string> start_notes, int64_t start, int64_t total,
           int64_t per_epoch)
      : model_summary(std::move(model)),
        notes(std::move(start_notes)),
        start_step(start),
        total_steps(total),
        steps_per_epoch(per_epoch) {}

  std::string model_summary;
  std::vector<std::string> notes;  // what the resume found and decided
  int64_t start_step = 0;          // completed steps this launch starts after
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 1;
  // trainer.precision as it runs: "fp32" or "bf16", what was asked ("fp32", "bf16", "auto"), why,
  // and a warning (bf16 without native support) or nothing. Empty precision: not said (a
  // re-formed group's begin).
  std::string precision;
  std::string precision_requested;
  std::string precision_reason;
  std::string precision_warning;
};

struct StepRecord {
  int64_t step = 0;   // completed steps, 1-based
  int64_t epoch = 0;  // 1-based epoch the step belongs to
  double loss = 0;    // this rank's share of the global mean loss
  double lr = 0;
  double seconds = 0;            // the step's wall time
  double comm_wait_seconds = 0;  // of `seconds`, blocked waiting for the gradient sync
  int64_t samples = 0;           // the global batch
  int64_t local_samples = 0;     // this rank's share of it
  double elapsed_seconds = 0;    // since the loop began
  // Bytes this rank handed to its transport since the launch began, summed over every group it
  // trained in (ProcessGroup::bytesSent): cumulative, 0 alone.
  uint64_t comm_bytes_sent = 0;
  // Low-communication training's outer rounds completed since the launch began, and the seconds
  // spent waiting on them, cumulative; outer_rounds < 0: not that kind of training, and the
  // records leave both out.
  int64_t outer_rounds = -1;
  double outer_wait_seconds = 0;
};

struct CheckpointRecord {
  int64_t step = 0;
  std::string path;
  double stall_ms = 0;  // the training thread's pause for it
  double encode_seconds = 0;
  double write_seconds = 0;
  uint64_t bytes = 0;
  std::vector<std::string> warnings;  // from retention
};

// A checkpoint that did not commit; the newest valid one is unchanged.
struct CheckpointFailureRecord {
  int64_t step = 0;
  std::string error;     // the save's error, naming the path and the cause
  int64_t in_a_row = 1;  // failed saves since the last one that committed, this one included
  // checkpoint.max_failures: the run stops at that many in a row; 0: the program decides.
  int64_t max_failures = 3;
  std::string newest_valid;  // the newest committed checkpoint of this run; empty: none yet
};

// One in-place re-forming of the group (launch.recovery: in_place), written once the first step
// after it completed.
struct ReformRecord {
  std::string cause;  // "failure", "leave" or "join"
  int64_t step = 0;   // the step the group trained from
  int64_t epoch = 0;  // the membership epoch it formed
  int64_t world_size = 0;
  int64_t detected_unix_ms = 0;   // the failure seen, or the boundary that agreed on the change
  double reform_ms = 0;           // agreeing, connecting and moving the state
  int64_t next_step_unix_ms = 0;  // the first step after it completed
};

// The ranks' shares of the global batch (trainer.balance), in force from step `step` + 1 on:
// written when a launch begins with balance on ("start"), and each time the shares change
// ("auto", with the rates they were computed from), so the shares in force at any step are those
// of the last balance record before it.
struct BalanceRecord {
  std::string reason;            // "start", "auto" or "reform"
  int64_t step = 0;              // completed steps
  std::vector<int64_t> shares;   // samples per rank
  std::vector<double> rates;     // auto: each rank's compute rate, samples/s; empty otherwise
  double predicted_speedup = 1;  // auto: predicted step compute time before / after
};

struct RunSummary {
  int64_t steps = 0;
  double epochs = 0;
  Evaluation test;
  bool evaluated = true;  // false: no evaluation ran, and the summary says nothing of `test`
  double wall_seconds = 0;
  int64_t parameters = 0;
  std::string parameter_digest;  // empty: not computed on this rank
  // As in StepRecord, at the end of the run.
  uint64_t comm_bytes_sent = 0;
  int64_t outer_rounds = -1;
  double outer_wait_seconds = 0;
};

class MetricsRecorder {
 public:
  virtual ~MetricsRecorder() = default;
  virtual void begin(const RunStart& start) = 0;
  // `startup` (may be null) has just marked the "step" phase.
  virtual void firstStep(int64_t step, const StartupProfile* startup) = 0;
  virtual void step(const StepRecord& record) = 0;
  virtual void evaluation(int64_t step, int64_t epoch, const Evaluation& result) = 0;
  // A series of the caller's own (<cumulus/recorder.h>'s Recorder::scalar). Default: nothing.
  virtual void scalar(int64_t /*step*/, const std::string& /*name*/, double /*value*/) {}
  virtual void checkpoint(const CheckpointRecord& record) = 0;
  // Every failed save, as it is seen (a background save's when the next save or the end of the
  // run collects it). By default a warning line.
  virtual void checkpointFailed(const CheckpointFailureRecord& record);
  // Routine news (rank 0 only by default) and warnings (every rank).
  virtual void note(const std::string& text) = 0;
  virtual void warning(const std::string& text) = 0;
  virtual void preempted(int64_t step, const std::string& checkpoint) = 0;
  // The group re-formed in place (rank 0's recorder records it). Default: nothing.
  virtual void reformed(const ReformRecord& /*record*/) {}
  // The shares of the global batch in force changed (every rank calls it). Default: nothing.
  virtual void balanced(const BalanceRecord& /*record*/) {}
  virtual void stepsEnded() = 0;
  // This launch ran `steps` steps, to `last_step`, in `seconds`.
  virtual void trained(int64_t last_step, int64_t steps, double seconds) = 0;
  virtual void finished(const RunSummary& summary) = 0;
};

// The default: Progress on `console` and, when `metrics_path` is set, a MetricsLog there (a launch
// that resumes after step S continues the file, MetricsLog::continueAfter, with a "resume" record).
// Train records go at step 1, every log_every_steps steps and at the last step, with the mean over
// the steps since the previous one; their loss is summed over ranks through `sum_over_ranks` (a
// collective on every rank at those steps), and the live line in between scales this rank's share
// by the world size.
struct ProgressRecorderOptions {
  std::ostream* console = nullptr;  // null: silent
  bool live = false;                // redraw one status line with '\r'
  bool quiet = false;               // Progress::quietFor(rank, trainer.log_all_ranks)
  int64_t log_every_steps = 0;
  std::string metrics_path;  // empty: no metrics.jsonl
  int64_t world_size = 1;
  // comm.compression when gradients are compressed ("bf16"): the resume and summary records say
  // so. Empty: none (and a world of one, which sends nothing).
  std::string compression;
  std::function<double(double)> sum_over_ranks;  // empty: a world of one
  int64_t rank = 0;
  // Also told every record and this rank's status (TensorBoard, the live endpoint).
  std::vector<std::shared_ptr<RecordSink>> sinks;
  // Adds what the caller knows to this rank's status at each train record (the group's
  // collectives, say); empty: nothing.
  std::function<void(nlohmann::ordered_json& status)> add_to_status;
  // The launch's goodput account (goodput.h), shared by the recorders of its re-formed groups.
  // Null: the recorder keeps its own, started at begin() from the exec (and, on a resume, the
  // history in metrics_path). Not started: begin() starts it so.
  std::shared_ptr<GoodputAccount> goodput;
};

// Sets a rank status's "collectives" ({"allreduce": {"count", "seconds", "bytes_sent"}, ...}, in
// the order given) and "comm_bytes_sent" from a group's counts (ProcessGroup::collectiveStats()
// and bytesSent()): what the live endpoint's per-op series and the dashboard's table read.
void addCollectives(nlohmann::ordered_json& status, const std::vector<CollectiveStats>& ops,
                    uint64_t bytes_sent);

class ProgressMetricsRecorder final : public MetricsRecorder {
 public:
  explicit ProgressMetricsRecorder(ProgressRecorderOptions options);
  ~ProgressMetricsRecorder() override;

  void begin(const RunStart& start) override;
  void firstStep(int64_t step, const StartupProfile* startup) override;
  void step(const StepRecord& record) override;
  void evaluation(int64_t step, int64_t epoch, const Evaluation& result) override;
  // A "scalar" record {"step", "name", "value"} (writing rank only).
  void scalar(int64_t step, const std::string& name, double value) override;
  void checkpoint(const CheckpointRecord& record) override;
  // A console line on every rank that saw it, and a "checkpoint_failed" record.
  void checkpointFailed(const CheckpointFailureRecord& record) override;
  void note(const std::string& text) override;
  void warning(const std::string& text) override;
  void preempted(int64_t step, const std::string& checkpoint) override;
  void reformed(const ReformRecord& record) override;
  void balanced(const BalanceRecord& record) override;
  void stepsEnded() override;
  void trained(int64_t last_step, int64_t steps, double seconds) override;
  void finished(const RunSummary& summary) override;

 private:
  // The steps since the last train record.
  struct Window {
    double loss = 0;
    double seconds = 0;
    double comm_wait = 0;
    int64_t steps = 0;
    int64_t samples = 0;
    int64_t local_samples = 0;
  };

  // Writes `record` to metrics.jsonl and hands it, stamped, to the sinks (writing rank only).
  void emit(const nlohmann::ordered_json& record);
  // A "goodput" record of the split at `step`.
  void emitGoodput(int64_t step);
  void publishRankStatus(const StepRecord& r, double loss, double samples_per_sec);

  ProgressRecorderOptions options_;
  std::ostream discard_{nullptr};  // the console when there is none: writes nothing, keeps nothing
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<MetricsLog> metrics_;
  int64_t total_steps_ = 0;
  Window window_;
  std::shared_ptr<GoodputAccount> goodput_;  // options_.goodput, or the recorder's own
  bool first_step_pending_ = false;
};

// When this process began, in Unix seconds (its goodput account's exec).
double launchExecTime();

}  // namespace cumulus::metrics
