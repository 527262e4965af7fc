#pragma once
// The workers of one node in one generation, and how the agent stops them. Used by the launcher
// (launcher.h) from its one thread; nothing here is thread-safe.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "launch/agent_console.h"
#include "launch/output_mux.h"
#include "launch/worker_process.h"

namespace cumulus::launch {

constexpr int kExitPreempted = 75;  // EX_TEMPFAIL: checkpointed, resumable
constexpr int kExitUsage = 2;       // a bad command or experiment: the same again on a restart
// The trainer's line at an agreed preemption stop ("preempted at step 7, checkpoint …").
constexpr const char* kPreemptedMarker = "preempted at step ";
// A worker's own account of why it failed: "<program>: error: …" (cumulus-train's last line on a
// failure), and the keeper's "cumulus-run: cannot execute <command>: <reason>".
constexpr const char* kErrorMarker = ": error: ";
constexpr const char* kCannotExecuteMarker = "cumulus-run: cannot execute ";

struct Worker {
  // Its global rank; a worker of a node that joined a running group late (recovery in place) has
  // none yet and carries its local rank, as in its placeholder RANK.
  int rank = 0;
  int local_rank = 0;
  std::string member_id;  // recovery in place: CUMULUS_MEMBER_ID, "<node>.<local>.<n>"; else ""
  std::string log_path;
  std::unique_ptr<WorkerProcess> process;
};

// This node's workers of one generation.
struct WorkerGroup {
  explicit WorkerGroup(FILE* console) : mux(console) {}
  int64_t generation = 0;
  std::vector<int64_t> node_ids;  // the nodes of the group, ascending
  int64_t world_size = 0;         // the round's
  int64_t node_rank = 0;          // this node's (GROUP_RANK); a late joiner: its node id
  bool joining = false;           // recovery in place: this node joined the running group late
  std::string log_dir;            // <run dir>/gen<g>
  int master_port = 0;            // MASTER_PORT (job_setup.h, prepareMasterPort)
  OutputMux mux;
  std::vector<Worker> workers;  // in local rank order

  // The worker of global rank `rank`, or nullptr.
  const Worker* byRank(int rank) const;
  // Each worker's status (poll(): reaps the ones that exited), in local rank order.
  std::vector<ExitStatus> poll();
};

// Stops every running worker: SIGTERM to each group, SIGKILL to the ones still alive after
// `grace` seconds. Keeps copying their output meanwhile so nothing they print on the way out is
// lost. Blocks up to `grace` + 5 s.
void stopWorkers(std::vector<Worker>& workers, OutputMux& mux, double grace);

// Kills every running worker's process group at once (SIGKILL, no grace) and copies what is left
// of their output. For a job that ends on a permanent failure: what a worker would save on a
// SIGTERM (a checkpoint of a diverged state) must not become the newest checkpoint. Blocks up to
// 5 s per worker.
void killWorkers(std::vector<Worker>& workers, OutputMux& mux);

// The last line of `rank`'s output that says why it failed (kErrorMarker, else
// kCannotExecuteMarker), or "". Needs both markers watched (OutputMux::watchFor).
std::string lastErrorLine(const OutputMux& mux, int rank);

// After the workers were asked to stop for a preemption: 0 if they had all finished (or some
// finished and the others left with 75: the training is over), else 75,
// the preemption code, whether the stop was the checkpointed one (every worker exited 75), the
// grace ran out, or the workers stopped before they could agree on a step (a notice during
// start-up); in the last two the previous checkpoint stays the newest valid one. Says which on
// `console`; `seconds` is how long they took to stop.
int reportPreemption(std::vector<Worker>& workers, OutputMux& mux, AgentConsole& console,
                     double seconds, double grace);

}  // namespace cumulus::launch
