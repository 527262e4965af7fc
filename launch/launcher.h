#pragma once
// The agent behind cumulus-run: hosts the rendezvous Store on node 0, starts this node's workers
// with the torchrun environment (docs/launch.md), supervises them, and restarts the whole
// group under a new generation when one fails.
//
// Exit codes of run():
//   0   every worker exited 0
//   1   a worker failed and no restarts were left (the message names the rank); the Store host
//       (node 0) was lost; or too few nodes (< MIN) came back after a restart
//   2   a usage or set-up error (bad flag, port in use, unreachable rendezvous, fewer than MIN
//       nodes at the first rendezvous), or a worker's permanent failure (its exit code 2 or 127,
//       restart_policy.h), on any node: never restarted or replaced; the other workers are killed
//       at once and the last line repeats the worker's own error line and names its log
//   75  preempted: the workers exited 75 (EX_TEMPFAIL) after a checkpoint; resumable
//   128+N  the launcher was stopped by signal N and stopped its workers
// A node that waits to join (late) and never gets in exits with node 0's code and reason.
//
// Across nodes, agents agree through the Store: each generation starts with a rendezvous round
// (launch/rendezvous_round.h) that fixes the group: which nodes, their node ranks and the world
// size handed to the workers. With --nnodes MIN:MAX the group is whoever is there (at least MIN);
// with --nnodes N it is all N. Any agent whose worker fails records `launch/<g>/failed`, which
// every agent watches, so all stop and join the next round together. A lost node never joins it,
// so the next group is smaller; a restart after a node loss counts against --max-restarts like a
// crash (a preemption never does). A node that arrives after its generation's group formed waits
// in the next round, and node 0 re-forms the group to admit it: every agent sends its workers
// SIGTERM (the trainer's preemption notice: agreed step, checkpoint, exit 75) and joins the next
// round; that is not counted as a restart. Losing node 0 ends the job: it hosts the Store (as
// torchrun's c10d store host does). Blocking waits on the Store use --rdzv-timeout.
//
// With recovery in place (--recovery in_place; not with the funnel's parameter server) the workers
// re-form the group themselves (comm/quorum.h): the agent marks a dead worker gone in the Store,
// starts a replacement in its slot (CUMULUS_JOIN=1; each counts against --max-restarts on this
// node) and leaves every other worker alone; a late node's workers join the running generation
// instead of waiting for the next round, and node 0 re-forms nothing. Giving up, a permanent
// failure and losing node 0 end the job as above; with no member of the group left, the group
// restarts as above.
//
// The parts: job_setup.h sets the job up (token, Store, parameter server); supervisor.h watches
// one generation and says how it ended; restart_policy.h decides what follows (pure);
// group_store.h is the agents' protocol over the Store, whose key names live in
// comm/store_keys.h; agent_console.h writes every line the agent says. This class joins them.

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/options.h"
#include "launch/rendezvous_round.h"

namespace cumulus::launch {

struct GroupEnd;
struct RestartDecision;
struct Worker;
struct WorkerGroup;

// What run() learned, for tests and the final console line.
struct LaunchReport {
  int exit_code = 0;
  int restarts = 0;  // group restarts after failures (in place: this node's replacements)
  int preemptions = 0;
  int failed_rank = -1;  // the rank of the last failure, if any
  std::string failure;   // "exit code 3", "signal SIGKILL"
};

class Launcher {
 public:
  // `console` gets the agent's lines and the workers' prefixed output; it is made line-buffered,
  // so construct the Launcher before anything is written to it.
  Launcher(LaunchOptions options, FILE* console);
  ~Launcher();

  // Runs the job to completion. Never throws: set-up errors become exit code 2 with a message.
  LaunchReport run();

  // Async-signal-safe: asks run() to stop the workers (SIGTERM, then SIGKILL after the grace)
  // and return 128 + sig. Called from cumulus-run's signal handler.
  static void requestStop(int sig);

 private:
  struct State;
  LaunchReport runOrThrow();
  // --metrics-port: starts node 0's endpoint (throws JobSetupError when it cannot listen).
  void startMetrics();
  // The rendezvous ended without a group: interrupted by a signal, or node 0 ended the job.
  void endBeforeGroup(const Round& round, LaunchReport& report);
  // Starts this node's workers of `round` with the torchrun environment; `joining`: the round is
  // a running group this node joins late (recovery in place).
  std::unique_ptr<WorkerGroup> startGroup(const Round& round, int restarts, bool joining);
  // The environment of worker `w` of `group`; `joiner`: it starts into a running group.
  std::vector<std::pair<std::string, std::string>> workerEnv(const WorkerGroup& group,
                                                             const Worker& w, bool joiner,
                                                             int restarts) const;
  // Starts `w` (of `group`, whose rank and local rank are set): names it (recovery in place), opens
  // its log and follows its output. Throws cumulus::CommError when the Store fails.
  void launchWorker(WorkerGroup& group, Worker& w, bool joiner, int restarts);
  // Supervises `group` until it ends; with recovery in place, replaces each worker that dies
  // while restarts are left and goes on.
  GroupEnd supervise(WorkerGroup& group, LaunchReport& report);
  // Whether the group's workers formed an in-place group (GroupStore::runsInPlace).
  bool workersRunInPlace(const WorkerGroup& group);
  std::optional<GroupEnd> replaceWorker(WorkerGroup& group, const GroupEnd& end,
                                        const RestartDecision& decision, LaunchReport& report);
  // Acts on the restart policy's decision after `group` ended. Returns whether to join the next
  // round; when not, report.exit_code is set.
  bool afterGroup(WorkerGroup& group, const GroupEnd& end, LaunchReport& report);
  void regroup(WorkerGroup& group, const RestartDecision& decision);
  bool restartAfter(WorkerGroup& group, const GroupEnd& end, RestartDecision decision,
                    LaunchReport& report);
  LaunchOptions options_;
  FILE* console_;
  std::unique_ptr<State> state_;
};

}  // namespace cumulus::launch
