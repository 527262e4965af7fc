#pragma once
// Every line the agent (cumulus-run) writes about itself, in one place: set-up, each generation,
// notices and signals, failures, restarts and the end of the job. Each line starts with
// "cumulus-run: " (the workers' own lines carry "[rankN] " instead, see output_mux.h). Scripts
// and tests match these texts, so change them knowingly.
//
// Writes straight to the FILE* it was given, which the launcher made line-buffered. Not
// thread-safe: used from the launcher's one thread.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "launch/restart_policy.h"

namespace cumulus::launch {

class AgentConsole {
 public:
  explicit AgentConsole(FILE* out) : out_(out) {}
  FILE* file() const { return out_; }

  // "cumulus-run: <text>": progress notes from parts that only say what happened.
  void note(const std::string& text);
  // The job could not start (or its set-up failed later): exit code 2.
  void setupError(const std::string& error);
  void rendezvousFailed(const std::string& error);

  // Set-up.
  void started(const std::string& run_id, const std::string& nodes, int64_t nproc_per_node,
               const std::string& store_endpoint, const std::string& bind_host,
               const std::string& run_dir);
  void pollingNotices(const std::string& source);
  void noticeWarning(const std::string& line);  // the notice source's own words, as they are
  void parameterServer(const std::string& endpoint);
  // --metrics-host names an address other machines reach: says what is served there, to whom.
  // `every_address` for a wildcard host (0.0.0.0, ::).
  void metricsExposed(const std::string& host, int port, bool every_address);
  // launch.recovery in_place asked for with the funnel's parameter server.
  void inPlaceFallsBack();
  // In place was asked for, but generation g's workers never formed an in-place group.
  void workersNotInPlace(int64_t generation);

  // One generation.
  void generationFormed(int64_t generation, const std::string& node_ids, int64_t world_size,
                        int64_t node_rank, int64_t first_rank, int64_t last_rank);
  // Recovery in place: this node arrived after the group of `generation` (nodes `node_ids`) formed;
  // its workers join that group as it runs.
  void joiningRunningGroup(int64_t generation, const std::string& node_ids, int64_t workers);
  // Recovery in place: a worker died and the group goes on; `replacement` is the new member id.
  void workerReplaced(int rank, const std::string& member, const std::string& status,
                      const std::string& replacement, int restarts, int64_t max_restarts);
  void markGoneFailed(const std::string& member, const std::string& error);
  void rebalance(const std::string& detail);
  void preemptionNotice(const std::string& detail, double grace);
  void stoppingOnSignal(int sig);
  void allFinished(int64_t workers);
  // How the workers stopped after a preemption notice (worker_group.h reportPreemption).
  void finishedBeforePreemption();
  // `ranks` ("1, 3") exited kExitPreempted at a notice of their own; the other `finished` workers
  // trained to the end (in place: the group went on without them).
  void finishedAfterLeaving(const std::string& ranks, int64_t finished);
  // `what`: the trainer's "preempted at step S, checkpoint …" line, or "preempted".
  void preempted(const std::string& what, double seconds);
  void preemptedAndKilled(double grace);
  void preemptedBeforeCheckpoint(int rank, const std::string& status, double seconds);
  void regroupUnreadable(const std::string& error);
  void finishUnconfirmed(int64_t generation, const std::string& error);

  // Before and between generations.
  void preemptedInRendezvous(int64_t generation);
  void signalInRendezvous(int sig);
  // The round ended without a group (node 0's job is over): says why with node 0's code.
  void roundEnded(int exit_code, const std::string& reason);
  void endWaitingFailed(int64_t generation, const std::string& error);

  // After a group ended: what the policy decided (restart_policy.h).
  void regrouping(const std::string& detail, double preemption_grace);
  void announceFailed(int64_t generation, const std::string& error);
  void stoppingGroup(const std::string& what);
  // Recovery in place, but no member of the group is left to go on (`why`; empty: every member
  // of this node's group has exited): it restarts instead.
  void noMembersLeft(const std::string& what, const std::string& why);
  void failureUnconfirmed(int64_t generation, const std::string& error);
  void storeLost(const std::string& store_endpoint, const std::string& error);
  // `log`: where to look (the failed rank's log, or errors.jsonl). `error`: the failed worker's
  // own last error line (worker_group.h lastErrorLine), or "": a permanent failure names it.
  void givingUp(const RestartDecision& decision, int64_t max_restarts, const std::string& log,
                const std::string& error = "");
  void restarting(int restarts, int64_t max_restarts);

 private:
  void say(const char* format, ...) __attribute__((format(printf, 2, 3)));
  FILE* out_;
};

}  // namespace cumulus::launch
