#pragma once
// What cumulus-spot observed about each launch of a job, and the report it derives. Pure
// functions over plain records, so the arithmetic is unit-tested without processes.
//
// The run's metrics.jsonl (metrics/metrics_log.h) is what cumulus-spot reads, not the console. A
// launch's records are those stamped ("time", Unix seconds) at or after its start; of those:
//   {"type":"resume","step":S}          this launch continues after S completed steps
//   {"type":"first_step","step":S}      this launch's first step is done (its "time" is when)
//   {"type":"train"|"eval","step":S}    the highest step reached
//   {"type":"checkpoint","step":S,"stall_ms":X}   a checkpoint committed; X is the training
//                                                 thread's pause for it
//   {"type":"preempted","step":S}       agreed stop after S steps, checkpoint written
//   {"type":"trained","steps":K,"seconds":T}   this process's training loop time
//   {"type":"goodput",…}                the trainer's split of the run's wall time so far
//                                       (metrics/goodput.h), cumulative over the launches
// Times are seconds since cumulus-spot started.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cumulus::launch {

struct LaunchRecord {
  int64_t index = 0;
  int64_t world_size = 0;  // 0: the command's own
  double start_s = 0;
  double end_s = 0;
  int exit_code = 0;  // -1 when a signal ended it
  int signal = 0;
  std::optional<double> notice_s;      // when the notice was sent
  bool killed = false;                 // still alive at the end of the notice period
  std::optional<double> first_step_s;  // when its first_step record was written
  int64_t resumed_from_step = 0;       // 0: started from scratch
  int64_t max_step = 0;                // highest completed step seen
  std::optional<int64_t> preempted_step;
  std::vector<double> stall_ms;  // one per checkpoint
  double train_seconds = 0;      // of its "trained" records, summed
  int64_t trained_steps = 0;
  // Its newest goodput record's numbers ("wall_s", "training_s", …, "productive_ratio"), in the
  // record's order; empty: none.
  std::vector<std::pair<std::string, double>> goodput;
};

// Reads launch `record`'s records from `jsonl`, the text of the run's metrics.jsonl after the
// launch ended: those stamped at or after `start_unix`, the launch's start (record.start_s) on the
// wall clock. Lines that are not JSON objects (a torn last line) and other records are ignored.
void observeMetrics(const std::string& jsonl, double start_unix, LaunchRecord& record);

struct SpotReportOptions {
  double baseline_seconds = 0;  // wall time of an uninterrupted run; 0: unknown
  int64_t global_batch = 0;     // samples per step; 0: unknown
};

struct SpotReport {
  int64_t launches = 0;
  int64_t preemptions = 0;  // launches that got a notice
  int64_t kills = 0;        // of those, still alive at the end of the notice
  int64_t crashes = 0;      // non-zero exits without a notice
  bool completed = false;   // the last launch exited 0
  double wall_s = 0;        // first start to last exit
  int64_t final_step = 0;
  // Steps a launch ran past the checkpoint the next launch that trained resumed from: work done
  // twice. Exact when every launch prints its progress each step, else a lower bound.
  int64_t steps_lost = 0;
  double goodput_steps_per_s = 0;
  double goodput_samples_per_s = 0;  // 0 without global_batch
  double goodput_ratio = 0;          // baseline / wall; 0 without baseline
  double notice_to_exit_mean_s = 0, notice_to_exit_max_s = 0;
  double restart_to_first_step_mean_s = 0, restart_to_first_step_max_s = 0;  // launches >= 1
  int64_t checkpoints = 0;
  double stall_share = 0;  // total checkpoint stall / total train time
  // The trainer's own account of where the wall time went (the last launch's goodput record);
  // empty when no launch wrote one.
  std::vector<std::pair<std::string, double>> goodput;
};

SpotReport summarize(const std::vector<LaunchRecord>& records, const SpotReportOptions& options);

// A human table, one row per launch then the totals.
std::string reportTable(const std::vector<LaunchRecord>& records, const SpotReport& report);
// One JSON object on one line (no newline), keys as the SpotReport fields.
std::string reportJson(const SpotReport& report);

}  // namespace cumulus::launch
