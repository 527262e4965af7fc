#pragma once
// RunRecords: what a launch says about its run, across every group it trains in. It owns the
// current membership's MetricsRecorder (made again each time the group re-forms in place), the
// sinks the process keeps for all of them (its TensorBoard events file, its live publisher), the
// launch's goodput account, and what was said before the records began (what set-up and the
// resume found, a re-forming during a joiner's start), which begin() writes first. No LibTorch
// here. Training thread only.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/run_env.h"
#include "metrics/goodput.h"
#include "metrics/recorder.h"

namespace cumulus::metrics {

class StorePublisher;

class RunRecords {
 public:
  // `tensorboard_dir`: where the writing rank's events file goes (empty: none); `warnings`: where the live
  // publisher reports a Store it cannot reach (nullptr: nowhere).
  RunRecords(std::string tensorboard_dir, std::ostream* warnings);
  ~RunRecords();

  // The sinks of a membership's recorder: the events file once this process writes (made the
  // first time), the live publisher when the run has a Store and live metrics (made once, told
  // the rank each time). One of each for the process, whatever re-formings come.
  std::vector<std::shared_ptr<RecordSink>> sinks(bool writes, const base::RunEnv& env);
  const std::shared_ptr<GoodputAccount>& goodput() const { return goodput_; }

  // The current membership's recorder, from use() on.
  void use(std::shared_ptr<MetricsRecorder> recorder) { recorder_ = std::move(recorder); }
  MetricsRecorder& recorder() { return *recorder_; }

  // Lines for the records: the recorder's once they began, otherwise kept for begin(). A warning
  // kept is written as "warning: …" (unless it says so already).
  void note(const std::string& line);
  void warning(const std::string& line);

  // The records' first lines: `start` with the kept lines after its own notes. The goodput
  // account starts from the launch's exec time and `history` (the launches before a resume).
  void begin(RunStart start, double exec_time, const GoodputHistory& history);

  // A re-forming that took `record.reform_ms` and ended now; its record is written by
  // afterStep(), once the next step completed (that step's time is part of it).
  void reformed(ReformRecord record);
  void afterStep();

 private:
  std::string tensorboard_dir_;
  std::ostream* warnings_;
  std::shared_ptr<MetricsRecorder> recorder_;
  std::shared_ptr<GoodputAccount> goodput_ = std::make_shared<GoodputAccount>();
  std::shared_ptr<RecordSink> tensorboard_;
  std::shared_ptr<StorePublisher> publisher_;
  std::vector<std::string> pending_;
  bool begun_ = false;
  std::optional<ReformRecord> reform_;  // until a step follows it
};

}  // namespace cumulus::metrics
