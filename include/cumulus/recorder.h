#pragma once
// <cumulus/recorder.h>: what a training loop of one's own says about its run, written as
// cumulus-train writes it (docs/observability.md): progress lines on the console, metrics.jsonl,
// TensorBoard event files, and the job's live endpoint and dashboard under
// `cumulus-run --metrics-port`, with the goodput split of where the wall time went. cumulus-train
// records through this class too: what its records hold, a loop's can.
//
//   cumulus::Elastic elastic(...);
//   cumulus::RecorderOptions options;
//   options.run_dir = "runs/a";
//   options.total_steps = steps;
//   cumulus::Recorder recorder(elastic, options);
//   while (elastic.step() < steps) {
//     double loss = 0;
//     elastic.train([&] { ...; loss = l.item<double>(); });
//     recorder.step({loss, local_batch, lr});         // every member, after each train()
//     recorder.scalar("grad_norm", norm);             // any series of the program's own
//     ...boundary()...
//   }
//   recorder.evaluation(test_loss, accuracy, seconds);
//   recorder.finish();
//
// The time Elastic owns is accounted by Elastic itself (ElasticTimes): each step's compute and
// its wait in sync(), re-forming and healing after a failure, a leave or a join, attempts a
// failure threw away, and the save after a boundary that agreed on a checkpoint. The recorder
// turns it into the goodput split (startup, training, comm_wait, evaluation, checkpoint, reform,
// redone, other), so a loop that only calls train() and boundary() already gets an honest one.
//
// Who writes: the member that is rank 0 of the current membership writes metrics.jsonl and the
// TensorBoard file; after a re-forming that made another member rank 0, that member continues the
// same file (the run directory must be one every member can reach, as for checkpoints). Every
// member sends its own status (step, samples/s, step time, comm wait, goodput) to the live
// endpoint.
//
// Loss: `StepMetrics::loss` is this member's mean over its samples; the records show the mean
// over the group's samples, summed over the members at each record (one 16-byte all-reduce every
// log_every_steps steps, run through Elastic::atBoundary(): a failure during it re-forms the group
// and that record shows this member's own loss instead).
//
// Bad input: a scalar whose name is a built-in series (train/..., eval/..., goodput/...,
// checkpoint/..., or one of the train record's keys) or empty is std::invalid_argument naming it;
// a value that is NaN or infinite is counted in dropped(), and the mean it falls in is written as
// null in metrics.jsonl and left out of TensorBoard and the live endpoint (a documented drop); any
// call after finish() is std::logic_error. A member that left on a notice (Elastic::left()) records
// nothing more: its step() and scalar() calls are dropped, since the group goes on without it.
// Errors writing a file are std::runtime_error naming the path. Training thread only.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cumulus/precision.h"

namespace cumulus {

class DiLoCo;
class Elastic;
class ProcessGroup;

struct RecorderOptions {
  // metrics.jsonl and the TensorBoard events (tensorboard/) go here, made by the writing member if
  // missing; empty: neither (the console and the live endpoint only).
  std::string run_dir;
  int64_t total_steps = 0;      // for the progress line and the last record; 0: not known
  int64_t steps_per_epoch = 0;  // 0: the whole run is one epoch
  // A train record at step 1, every log_every_steps steps and at total_steps, with the means
  // over the steps since the one before.
  int64_t log_every_steps = 10;
  // The steps of the state this launch resumed from (its checkpoint's): metrics.jsonl is continued
  // after that step, and the goodput account takes over the launches' before it. 0: a fresh run.
  int64_t start_step = 0;
  bool tensorboard = true;  // events under run_dir/tensorboard
  bool live = true;         // the live endpoint, when cumulus-run --metrics-port asks for it
  std::ostream* console = &std::cout;  // progress lines (rank 0); null: silent
  bool live_progress = false;  // one status line redrawn with '\r' instead of a line per record
  bool log_all_ranks = false;  // every member prints its progress lines, not rank 0 alone
  std::string model;           // a line "model: ..." at the start; empty: none
  // The precision the loop trains in, as choosePrecision() chose it: a "precision" record and a
  // line at the start. Unset: not said.
  std::optional<PrecisionChoice> precision;
  // The gradients' compression on the wire ("bf16", DataParallelOptions::compression), which the
  // resume and summary records name; empty: none.
  std::string compression;
  // A DiLoCo loop's outer syncs (must outlive the recorder): each train record and the summary
  // carry its rounds and the time waited for them (DiLoCoStats). Null: not that kind of loop.
  const DiLoCo* diloco = nullptr;
};

// One step as this member saw it.
struct StepMetrics {
  double loss = 0;      // this member's mean loss over its samples of the step
  int64_t samples = 0;  // this member's samples in the step
  double lr = 0;
  // The group's samples in the step; 0: `samples` times the group's size (equal shares).
  int64_t global_samples = 0;
  // The step's wall time and, of it, the wait for the gradients' sum, for a loop that timed them
  // itself (its own all-reduce, DiLoCo's outer wait); negative: Elastic's (train()'s attempt and
  // sync()'s wait).
  double seconds = -1;
  double comm_wait_seconds = -1;
};

// A checkpoint the program saved and timed itself (a background write that ended after training
// went on, say): Recorder::checkpointSaved.
struct CheckpointSaved {
  int64_t step = 0;
  std::string path;
  double stall_seconds = 0;   // the training thread's pause for it (the goodput's checkpoint time)
  double encode_seconds = 0;  // of the save: turning the state into bytes
  double write_seconds = 0;   // and writing them
  uint64_t bytes = 0;
  std::vector<std::string> warnings;  // retention's, say: written with the record
};

// What the summary says of the model at the end of the run (Recorder::finish).
struct RunTotals {
  int64_t parameters = 0;        // 0: not said
  std::string parameter_digest;  // a hash of the final parameters; empty: not said
};

// The split of where the wall time went, in seconds (cumulative over the run, every launch).
struct Goodput {
  double wall = 0, startup = 0, training = 0, comm_wait = 0, evaluation = 0, checkpoint = 0,
         reform = 0, restart = 0, redone = 0, other = 0;
  double productive_ratio = 0;  // (training + comm_wait) / wall
};

class Recorder {
 public:
  // Over `elastic` (which must outlive the recorder), after or before its start(): the records
  // begin at the first step(). Throws std::invalid_argument for a negative count and
  // std::runtime_error for a metrics.jsonl it cannot continue (naming the path).
  explicit Recorder(Elastic& elastic, RecorderOptions options = {});
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // After each train() that committed a step (Elastic::step() is its number), on every member.
  // It may communicate (the loss at a record): call it before boundary(), as atBoundary() work.
  void step(const StepMetrics& metrics);
  // A value of a series of the program's own at the current step (Elastic::step()). Values are
  // written at the steps that have a train record (and at finish()), each series as the mean of
  // its values since it was last written: a "scalar" record of metrics.jsonl {"step" (of the
  // newest value), "name", "value"}, the TensorBoard tag `name`, and cumulus_scalar{name=...} at
  // /metrics. A value logged every step costs the other steps no write. Written by the writing
  // member; on the others kept for nothing.
  void scalar(const std::string& name, double value);
  // An evaluation on held-out data that took `seconds` (its goodput category), at the current step.
  void evaluation(double loss, std::optional<double> accuracy = std::nullopt, double seconds = 0);
  // The members' shares of the global batch from the next step on (BatchShares calls it): a
  // "balance" record, with the rates they came from and the step time they predict before /
  // after, which the dashboard draws. `reason`: "auto" (a look at the rates changed them),
  // "start" (the launch's first shares) or "reform" (equal again after a change of membership);
  // any other is std::invalid_argument. Called on every member; the writing one writes.
  void balance(const std::vector<int64_t>& shares, const std::vector<double>& rates,
               double predicted_speedup, const std::string& reason = "auto");
  // The program's save of a checkpoint at the current step, on the member that saves (rank 0):
  // `save` runs here and returns where the checkpoint went (a directory or a file). Its time is
  // the checkpoint's stall, in the goodput's checkpoint time (counted once, also after a
  // boundary that agreed kCheckpoint, whose save Elastic times too), and a "checkpoint" record
  // {"step", "stall_ms", "path"} is written, which the dashboard marks on the run's timeline.
  // Returns save's path. A save that throws writes a "checkpoint_failed" record {"step", "error",
  // "in_a_row", "newest_valid"} (the last path this recorder saw saved) and the exception goes on.
  std::string checkpoint(const std::function<std::string()>& save);
  // A save the program ran and timed itself, at `saved.step` (a "checkpoint" record as
  // checkpoint() writes; its stall counted once, as there), and a save that failed at `step`: a
  // "checkpoint_failed" record with the failures in a row and `max_failures` (the program's
  // limit, for the reader; 0: none said). A write that ends after the steps did is recorded
  // before finish() or preempted().
  void checkpointSaved(const CheckpointSaved& saved);
  // `newest_valid`: the newest checkpoint the program knows to be whole (one an earlier launch
  // saved, say); empty: the last one this recorder saw saved.
  void checkpointFailed(int64_t step, const std::string& error, int64_t max_failures = 0,
                        const std::string& newest_valid = "");
  // The records follow the membership that just formed: called from Elastic::onMembershipChange's
  // callback, a re-forming's "reform" record and its line ("re-formed in place: epoch 1, rank 0
  // of 3 (was rank 0 of 4), training from step 10 in 412 ms; ...", on every member) come as it
  // happens; otherwise the next call of the recorder makes them.
  void membershipChanged();
  // The launch stops at a notice (a boundary that agreed kStop; call it after waitForAll(), on
  // every member): a "preempted" record {"step", "checkpoint"} and the launch's "trained" and
  // goodput records, which the next launch (start_step = the checkpoint's step) continues from.
  // It ends the records as finish() does, without the summary; the destructor of a recorder
  // that neither finished nor stopped writes nothing more.
  void preempted(const std::string& checkpoint);
  // A line on the console (rank 0) and a warning (every member).
  void note(const std::string& text);
  void warning(const std::string& text);
  // The end of the run: the "trained" and goodput records, and the summary (steps, wall time,
  // the last evaluation, `totals`). Once; everything after it (or after preempted()) is
  // std::logic_error.
  void finish(const RunTotals& totals = {});

  // The split now, on this member (every member keeps one).
  Goodput goodput() const;
  // Values dropped as NaN or infinite since construction.
  int64_t dropped() const;

  struct Impl;

 private:
  friend struct RecorderAccess;  // api/recorder_hooks.h
  std::unique_ptr<Impl> impl_;
};

// The comm side of a group at the live endpoint, for a program without a Recorder (the
// torch.distributed backend `cumulus` keeps one, so a DDP script under `cumulus-run
// --metrics-port` shows its collectives): update() sends the group's collectiveStats() and
// bytesSent() as this rank's status when `interval_seconds` have passed since the last time, and
// the destructor sends the last figures. Nothing is sent unless cumulus-run asks for live metrics;
// the Store is talked to on a thread of its own, so update() never blocks on it. One thread at a
// time calls update().
class CommMetrics {
 public:
  // `group` must outlive this object.
  explicit CommMetrics(const ProcessGroup& group, double interval_seconds = 1.0);
  ~CommMetrics();
  CommMetrics(const CommMetrics&) = delete;
  CommMetrics& operator=(const CommMetrics&) = delete;
  void update();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus
