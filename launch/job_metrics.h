#pragma once
// JobMetrics: node 0's live view of the job, behind cumulus-run --metrics-port
// (launch/metrics_server.h). It joins what the agent knows (generations, failures by cause,
// preemptions, restarts) with what the workers send through the Store (metrics/store_publisher.h:
// the writing rank's metrics.jsonl records, each rank's status), and renders it three ways:
//   prometheus()  the Prometheus text exposition format 0.0.4 (names below)
//   status()      the dashboard's JSON summary (GET /api/status)
//   records()     the records in order, the agent's own events among them (GET /api/records)
// Thread-safe: the launcher's thread tells it events, a poller reads the Store, the HTTP server's
// threads render. Rendering never touches the Store, so /metrics answers at once however busy the
// workers or the Store are.
//
// Metrics (every name starts with cumulus_; seconds and bytes as unit suffixes; counters end in
// _total; all series of one run):
//   cumulus_up{state}                      1 for the job's state: running, finished, failed,
//                                          preempted
//   cumulus_step, cumulus_epoch            the newest train record's
//   cumulus_world_size, cumulus_membership_epoch, cumulus_generation
//   cumulus_loss, cumulus_test_loss, cumulus_test_accuracy   when known
//   cumulus_samples_per_second             the job's, the newest train record's
//   cumulus_rank_samples_per_second{rank}  each rank's share of the batch over the step time
//   cumulus_rank_step_seconds{rank}, cumulus_rank_comm_wait_seconds{rank}   per step
//   cumulus_batch_share_samples{rank}      the shares of the global batch in force (balance
//                                          records; with balance off, each rank's samples a step)
//   cumulus_goodput_seconds_total{category}  the goodput split (metrics/goodput.h): startup,
//                                          training, comm_wait, evaluation, checkpoint, reform,
//                                          restart, redone, other
//   cumulus_wall_seconds_total             the run's wall time the split covers
//   cumulus_goodput_ratio                  productive (training + comm wait) / wall
//   cumulus_preemptions_total, cumulus_restarts_total (of the whole group),
//   cumulus_replacements_total (in place: workers started in a dead one's slot; each counts
//   against --max-restarts), cumulus_checkpoints_total, cumulus_checkpoint_failures_total
//   cumulus_failures_total{cause}          workers that died, by how ("exit code 1", "signal
//                                          SIGKILL")
//   cumulus_reformings_total{cause}        in-place re-formings: failure, leave, join
//   cumulus_last_checkpoint_step, cumulus_last_checkpoint_age_seconds
//   cumulus_live_records_total             records received from the workers
//   cumulus_live_records_malformed_total   of those, with a field of an unexpected type
//   cumulus_comm_bytes_sent_total          bytes rank 0 handed to its transport since the launch
//                                          began (the newest train record's comm_bytes_sent)
//   cumulus_outer_rounds_total, cumulus_outer_wait_seconds_total   low-communication training's
//                                          outer rounds and the wait on them (the newest train
//                                          record's), only when it has them
// A counter never goes down: after a rollback the trainer's split starts again from the
// checkpoint's, and the exported counters hold their highest value until the split passes it.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/annotated_mutex.h"
#include "comm/store.h"

namespace cumulus::launch {

class PrometheusText;

class JobMetrics {
 public:
  using Clock = std::function<double()>;  // Unix seconds; empty: the system clock

  explicit JobMetrics(std::string run_id, Clock clock = {});

  // The agent's events ("start", "restart", "failure", "preemption", "join", "leave",
  // "finished"); `rank` < 0: none. They become "agent" records.
  void agentEvent(const std::string& event, int64_t generation, int64_t world_size,
                  const std::string& cause = "", int64_t rank = -1);
  // "running", "finished", "failed" or "preempted".
  void setState(const std::string& state);

  // A record the writing rank wrote to metrics.jsonl (metrics/metrics_log.h).
  void addRecord(const nlohmann::json& record);
  // What `record` tells the metrics and the status, without keeping it for records(): for
  // cumulus-report, which reads a whole metrics.jsonl and keeps its own selection of it.
  void foldRecord(const nlohmann::json& record);
  void setRankStatus(int64_t rank, const nlohmann::json& status);
  // Reads the records and statuses the workers sent since the last call (and removes the records
  // from the Store). A record whose number was taken but never written (its sender died between
  // the two calls) is skipped after 5 s. Throws what the Store throws.
  void poll(comm::Store& store);

  std::string prometheus() const;
  nlohmann::json status() const;
  // {"next": N, "records": [records after, …]}, at most `max` of them.
  nlohmann::json records(int64_t after, int64_t max) const;

 private:
  void addLocked(nlohmann::json record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // fold() that counts the record, and the malformed ones, instead of throwing.
  void countAndFold(const nlohmann::json& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // What a record tells the metrics. Throws nlohmann::json::exception on a field of another type.
  void fold(const nlohmann::json& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The families of prometheus(), under the lock.
  void exposeJob(PrometheusText& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void exposeRanks(PrometheusText& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void exposeGoodput(PrometheusText& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void exposeCollectives(PrometheusText& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void exposeEvents(PrometheusText& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void exposeComm(PrometheusText& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  double counter(const std::string& name, double value) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The shares of the global batch in force: the newest balance record's, else (balance off) the
  // samples per step each rank's status says; empty when a rank has not said yet.
  std::vector<int64_t> sharesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  std::string run_id_;
  Clock clock_;
  mutable base::Mutex mutex_;
  std::vector<nlohmann::json> records_ ABSL_GUARDED_BY(mutex_);
  std::map<int64_t, nlohmann::json> ranks_ ABSL_GUARDED_BY(mutex_);
  std::string state_ ABSL_GUARDED_BY(mutex_) = "running";
  int64_t generation_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t world_size_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t membership_epoch_ ABSL_GUARDED_BY(mutex_) = 0;
  // The newest train record.
  nlohmann::json train_ ABSL_GUARDED_BY(mutex_) = nlohmann::json::object();
  std::optional<double> test_loss_ ABSL_GUARDED_BY(mutex_);
  std::optional<double> test_accuracy_ ABSL_GUARDED_BY(mutex_);
  // The newest split, from a goodput record or rank 0's status, and its time.
  nlohmann::json goodput_ ABSL_GUARDED_BY(mutex_) = nlohmann::json::object();
  double goodput_time_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<int64_t> shares_ ABSL_GUARDED_BY(mutex_);
  // The newest value of each series of the program's own ("scalar" records), at most
  // kMaxScalars names: later names are left out of /metrics (the records keep them).
  std::map<std::string, double> scalars_ ABSL_GUARDED_BY(mutex_);
  int64_t preemptions_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t restarts_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t replacements_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t checkpoints_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t checkpoint_failures_ ABSL_GUARDED_BY(mutex_) = 0;
  std::map<std::string, int64_t> failures_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, int64_t> reformings_ ABSL_GUARDED_BY(mutex_);
  std::optional<int64_t> last_checkpoint_step_ ABSL_GUARDED_BY(mutex_);
  double last_checkpoint_time_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t received_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t malformed_ ABSL_GUARDED_BY(mutex_) = 0;
  // The Store's reading position.
  int64_t next_record_ ABSL_GUARDED_BY(mutex_) = 0;
  double missing_since_ ABSL_GUARDED_BY(mutex_) = 0;
  // The highest value exported per counter series (prometheus() is const: the memory is not).
  mutable std::map<std::string, double> exported_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace cumulus::launch
