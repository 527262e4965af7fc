#pragma once
// Step-loop parts that tests install through TrainerOptions (trainer.h PartChoice) to make a run
// do something at a chosen point: cumulus-train-faults uses them, and batch_source_test and
// stop_agreement_test check them.

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "cumulus/preemption.h"
#include "metrics/recorder.h"
#include "trainer/batch_source.h"

namespace cumulus::trainer {

// A BatchSource that passes everything but next() to `inner`: the base of the wrappers below.
class ForwardingBatchSource : public BatchSource {
 public:
  explicit ForwardingBatchSource(std::shared_ptr<BatchSource> inner) : inner_(std::move(inner)) {}

  int64_t stepsPerEpoch() const override { return inner_->stepsPerEpoch(); }
  cumulus::SamplerState position() const override { return inner_->position(); }
  void restore(const cumulus::SamplerState& position) override { inner_->restore(position); }
  void reshard(int64_t rank, int64_t world_size) override { inner_->reshard(rank, world_size); }
  void setShares(const std::vector<int64_t>& shares) override { inner_->setShares(shares); }

 protected:
  std::shared_ptr<BatchSource> inner_;
};

// Wraps a BatchSource and appends, for each step, the line resume.h ledgerLine() makes of this
// rank's sample indices to `path` (opened for appending; std::runtime_error naming it if it cannot
// be). `launch` orders the launches of one job: the same number on every rank of a launch, larger
// for a later launch (SampleLedger::dropReplayedSteps); in place it is the epoch's communicator
// generation, read at each step, as is the rank.
class LedgerBatchSource final : public ForwardingBatchSource {
 public:
  LedgerBatchSource(std::shared_ptr<BatchSource> inner, const std::string& path,
                    std::function<int64_t()> launch, std::function<int64_t()> rank);

  StepBatch next(int64_t step, int64_t micro_batches) override;

 private:
  std::string path_;
  std::ofstream out_;
  std::function<int64_t()> launch_;
  std::function<int64_t()> rank_;
};

// Wraps a BatchSource and kills this process with SIGKILL when step `step` (0-based) is drawn:
// at once, or `delay_ms` later from another thread (mid-forward or mid-backward), or, with
// `stall`, sleeps that long instead (a worker that only stalled).
class KillAtStep final : public ForwardingBatchSource {
 public:
  KillAtStep(std::shared_ptr<BatchSource> inner, int64_t step, int64_t delay_ms, bool stall);

  StepBatch next(int64_t step, int64_t micro_batches) override;

 private:
  int64_t step_;
  int64_t delay_ms_;
  bool stall_;
};

// Wraps a BatchSource and sleeps `us_per_sample` microseconds for each sample of this rank's share
// at every step: a worker that computes more slowly than the others (trainer.balance).
class SlowSamples final : public ForwardingBatchSource {
 public:
  SlowSamples(std::shared_ptr<BatchSource> inner, int64_t us_per_sample);

  StepBatch next(int64_t step, int64_t micro_batches) override;

 private:
  int64_t us_per_sample_;
};

// Wraps a BatchSource and, when step `step` is drawn, calls `wait` first, so that a test can hold
// a group at a step until something has happened (a joiner took its ticket).
class HoldAtStep final : public ForwardingBatchSource {
 public:
  HoldAtStep(std::shared_ptr<BatchSource> inner, int64_t step, std::function<void()> wait);

  StepBatch next(int64_t step, int64_t micro_batches) override;

 private:
  int64_t step_;
  std::function<void()> wait_;
};

// A MetricsRecorder that passes every record on to `inner`: the base of the wrappers below.
class ForwardingRecorder : public metrics::MetricsRecorder {
 public:
  explicit ForwardingRecorder(std::shared_ptr<metrics::MetricsRecorder> inner)
      : inner_(std::move(inner)) {}

  void begin(const metrics::RunStart& start) override { inner_->begin(start); }
  void firstStep(int64_t step, const metrics::StartupProfile* startup) override {
    inner_->firstStep(step, startup);
  }
  void step(const metrics::StepRecord& record) override { inner_->step(record); }
  void evaluation(int64_t step, int64_t epoch, const metrics::Evaluation& result) override {
    inner_->evaluation(step, epoch, result);
  }
  void checkpoint(const metrics::CheckpointRecord& record) override { inner_->checkpoint(record); }
  void checkpointFailed(const metrics::CheckpointFailureRecord& record) override {
    inner_->checkpointFailed(record);
  }
  void note(const std::string& text) override { inner_->note(text); }
  void warning(const std::string& text) override { inner_->warning(text); }
  void preempted(int64_t step, const std::string& checkpoint) override {
    inner_->preempted(step, checkpoint);
  }
  void reformed(const metrics::ReformRecord& record) override { inner_->reformed(record); }
  void stepsEnded() override { inner_->stepsEnded(); }
  void trained(int64_t last_step, int64_t steps, double seconds) override {
    inner_->trained(last_step, steps, seconds);
  }
  void finished(const metrics::RunSummary& summary) override { inner_->finished(summary); }

 protected:
  std::shared_ptr<metrics::MetricsRecorder> inner_;
};

// Kills this process with SIGKILL when a note or a warning containing `text` is recorded: a death
// at a chosen point of an in-place re-forming ("re-forming the group in place" as it starts,
// "sends the training state" as the heal starts on the sender).
class KillOnText final : public ForwardingRecorder {
 public:
  KillOnText(std::shared_ptr<metrics::MetricsRecorder> inner, std::string text);

  void note(const std::string& text) override;
  void warning(const std::string& text) override;

 private:
  std::string text_;
};

// Kills this process with SIGKILL as step `step` (1-based) is recorded, before its record's sum
// over the ranks: a death in the step's boundary, after every member committed the step (the last
// step's included, whose boundary is the run's last).
class KillAtRecord final : public ForwardingRecorder {
 public:
  KillAtRecord(std::shared_ptr<metrics::MetricsRecorder> inner, int64_t step);

  void step(const metrics::StepRecord& record) override;

 private:
  int64_t step_;
};

// Raises a real SIGTERM at this process when step `step` is recorded, which the loop does after
// the step and before its boundary's agreement: the run then stops (or, in place, this member
// leaves) there, as it would for a notice that arrived during that step.
class SigtermAtStep final : public ForwardingRecorder {
 public:
  SigtermAtStep(std::shared_ptr<metrics::MetricsRecorder> inner, int64_t step);

  void step(const metrics::StepRecord& record) override;

 private:
  int64_t step_;
};

// Fills the disk that holds `path` once the checkpoint of step `step` is recorded: writes `path`
// until the file system refuses more (ENOSPC), so that the saves after it meet a full disk, as
// when another job's files take the room this run found free at its start. std::runtime_error
// naming `path` if it cannot be written at all.
class FillDiskAfterCheckpoint final : public ForwardingRecorder {
 public:
  FillDiskAfterCheckpoint(std::shared_ptr<metrics::MetricsRecorder> inner, int64_t step,
                          std::string path);

  void checkpoint(const metrics::CheckpointRecord& record) override;

 private:
  int64_t step_;
  std::string path_;
};

}  // namespace cumulus::trainer
