#pragma once
// Goodput: where the wall time of a run went. No LibTorch here.
//
// The split (seconds, cumulative over the whole run, every launch of it):
//   startup     a launch's exec to the start of its first step (loading, connecting, resuming)
//   training    the steps' compute (forward, backward, optimizer, data), comm wait excluded
//   comm_wait   the steps' wait for the gradient sync
//   evaluation  the test-set evaluations
//   checkpoint  the training thread's pauses for checkpoints (the stall, not the write behind it)
//   reform      in place: from a failure, leave or join seen to the first step after the group
//               re-formed and healed the joiner
//   restart     between launches: from the last record the previous launch wrote to this
//               launch's exec (the death, the agent's restart or relaunch, the process start)
//   redone      work that a rollback threw away: from the goodput record of the checkpoint a
//               launch resumed from to the last record the launch before it wrote; in place,
//               the attempts at a step that a peer's failure threw away (Elastic loops)
//   other       the rest of the wall time (records, boundaries, agreement between steps)
// productive_ratio = (training + comm_wait) / wall: the share of the wall time spent in steps
// that count.
//
// The trainer writes the split as a "goodput" record of metrics.jsonl (at each committed
// checkpoint and at the end of each launch) and sends it with every train record to the live
// endpoint. A resumed launch starts from the record of the checkpoint it resumed from.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cumulus::metrics {

struct GoodputSplit {
  double wall_s = 0;
  double startup_s = 0;
  double training_s = 0;
  double comm_wait_s = 0;
  double evaluation_s = 0;
  double checkpoint_s = 0;
  double reform_s = 0;
  double restart_s = 0;
  double redone_s = 0;
  double other_s = 0;  // wall_s less the others, never below 0

  double productiveRatio() const;
  // {"wall_s":…, …, "other_s":…, "productive_ratio":…}
  nlohmann::ordered_json toJson() const;
  // From a goodput record (missing keys are 0).
  static GoodputSplit fromJson(const nlohmann::json& record);
};

// What a resumed launch learns from the metrics.jsonl of the launches before it, read before the
// file is cut back to the resumed step: the newest goodput record of a step <= `step` (the
// checkpoint's) and the time of the file's last record.
struct GoodputHistory {
  std::optional<GoodputSplit> base;  // none: an older file, or no checkpoint record yet
  double base_time = 0;              // the base record's "time"
  double last_time = 0;              // the last record's "time"; 0: none
};
// No file: no history. Throws UserError naming the path when it is not a regular file (a FIFO).
GoodputHistory readGoodputHistory(const std::string& metrics_path, int64_t step);

// The running account of one launch. Times are Unix seconds from the caller's clock. Training
// thread only.
class GoodputAccount {
 public:
  GoodputAccount() = default;
  // A launch that began (exec) at `exec_time`; `history` from readGoodputHistory on a resume.
  GoodputAccount(double exec_time, const GoodputHistory& history = {}) {
    start(exec_time, history);
  }
  // The same for an account made before the launch knew its history. Once: later calls do
  // nothing (an in-place re-forming keeps the launch's account).
  void start(double exec_time, const GoodputHistory& history = {});
  bool started() const { return started_; }

  // The first step began at `time` (its end less its duration).
  void firstStep(double time);
  void step(double seconds, double comm_wait_seconds);
  void evaluation(double seconds) { now_.evaluation_s += seconds; }
  void checkpointStall(double seconds) { now_.checkpoint_s += seconds; }
  void reform(double seconds) { now_.reform_s += seconds; }
  // In place: a step's attempt that a peer's failure threw away (Elastic loops' ElasticTimes).
  void redone(double seconds) { now_.redone_s += seconds; }

  // The split at `time`.
  GoodputSplit at(double time) const;

 private:
  bool started_ = false;
  double run_start_ = 0;  // the wall clock's zero: the first launch's exec
  bool first_step_seen_ = false;
  double exec_time_ = 0;
  GoodputSplit now_;  // every category but wall and other
};

}  // namespace cumulus::metrics
