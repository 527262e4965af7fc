#pragma once
// What the agent does once its group of one generation has ended: end the job, restart the group
// under a new generation, re-form it to admit waiting nodes, or give up. Pure: no processes, no
// Store, no clock. The supervision loop (supervisor.h) says how the group ended, this policy
// decides, and the launcher (launcher.cc) acts on the decision and prints it (agent_console.h).
//
// The rules (launcher.h has the exit codes):
//   - a group that ended the job (finished, preempted, stopped by a signal) ends it with its code;
//   - node 0 re-forming the group to admit waiting nodes is not a restart;
//   - a permanent failure, one that a restart would repeat, gives up at once with exit code 2 on
//     every node, whatever --max-restarts allows, with recovery in place too: a worker's exit
//     code 2 (a usage
//     or configuration error, or the trainer's PermanentError: the loss diverged, the model's code
//     threw, the disk is full) or 127 (the command cannot be executed). When several workers
//     failed together, a permanent failure among them decides;
//   - any other failure, here or on another node (a lost node included), is one restart of the
//     group, while restarts are left; then give up with exit code 1;
//   - without node 0's Store the job cannot go on: give up with exit code 1.
// With recovery in place (`in_place`) a failure of this node's worker, while restarts are left,
// is instead one replacement of that worker (counted like a restart) and the group goes on; with
// none left the job gives up as above. When no member of the group is left to go on (every
// worker of a one-node group has exited), a replacement would have no one to join: the group
// restarts instead, from the newest checkpoint. Another node's recorded failure then means that
// node gave up, which ends the job here too (exit code 1).

#include <cstdint>
#include <string>
#include <vector>

#include "launch/worker_process.h"

namespace cumulus::launch {

// How one generation's group ended on this node, as the supervision loop saw it.
struct GroupEnd {
  enum class Kind {
    kExit,           // the job's outcome is settled (finished, preempted, stopped by a signal)
    kWorkerFailed,   // a worker of this node exited non-zero (not 75) or by a signal
    kRemoteFailure,  // a worker on another node failed; `detail` says which
    kStoreLost,      // node 0's Store did not answer; `detail` is the error
    kRegroup,        // node 0 re-forms the group to admit waiting nodes; `detail` says which
  };
  Kind kind = Kind::kExit;
  int exit_code = 0;     // kExit: the job's exit code
  int failed_rank = -1;  // kWorkerFailed: the failed worker (global rank) that decides
  ExitStatus failed_status;
  // kWorkerFailed: whether any member of the group may still run (a worker of this node that has
  // not exited, or another node of the group; in place, the Store's membership says).
  bool members_left = true;
  // When none is left, in place: why ("no member of the group holds the training state any
  // more", "the group had not formed yet").
  std::string no_members;
  // kRemoteFailure: another node's worker failed permanently (exit code 2 or 127).
  bool permanent = false;
  // kExit: why, for nodes still waiting to join ("finished", "preempted",
  // "node 0's launcher was stopped by SIGINT"); otherwise as above.
  std::string detail;
};

// Whether a worker's failure is one that a restart or a replacement would repeat: exit code 2
// (kExitUsage) or 127 (kExitCannotExecute).
bool isPermanentFailure(const ExitStatus& status);

// How this node's workers stand, from their exit statuses (in local rank order).
struct WorkerExits {
  bool all_exited = true;
  bool any_preempted = false;  // some exited 75 (EX_TEMPFAIL) after an agreed stop
  // Index of the failure that decides: the first permanent one (isPermanentFailure), else the
  // first that exited non-zero (not 75) or by a signal; -1 if none.
  int first_failed = -1;
};
WorkerExits summarizeExits(const std::vector<ExitStatus>& statuses);

struct RestartDecision {
  enum class Action {
    kExit,     // the job is over: exit with `exit_code`
    kRegroup,  // stop the workers as for a preemption and join the next round; not a restart
    kRestart,  // stop the workers and join the next round as restart number `restarts`
    kGiveUp,   // stop the workers and exit with `exit_code`
    kReplace,  // in place: the failed worker is gone; start a replacement as restart `restarts`
  };
  enum class Why {
    kNone,
    kRepeatable,          // kGiveUp: a worker's usage error or permanent failure (exit code 2)
    kCannotExecute,       // kGiveUp: the worker's command cannot be executed (exit code 127)
    kNoRestartsLeft,      // kGiveUp: --max-restarts restarts were used
    kStoreLost,           // kGiveUp: node 0's Store is unreachable; `store_error` says how
    kOtherNodeGaveUp,     // kGiveUp, in place: another node's failure ended the job
    kOtherNodePermanent,  // kGiveUp: another node's worker failed permanently (exit code 2)
    kNoMembersLeft,       // kRestart, in place: no member of the group is left to go on
  };
  Action action = Action::kExit;
  Why why = Why::kNone;
  int exit_code = 0;  // kExit, kGiveUp
  int restarts = 0;   // kRestart, kReplace: the restarts counting this one
  // What ended the group ("rank 1 failed (exit code 3)", "rank 3 failed (…) on another node",
  // "the rendezvous Store is unreachable (…)"); kRegroup: why node 0 re-forms the group.
  std::string what;
  std::string no_members;  // kNoMembersLeft: GroupEnd::no_members
  // Tell the other nodes what failed (a failure of this node, in a multi-node job).
  bool publish_failure = false;
  std::string store_error;  // kStoreLost
};

class RestartPolicy {
 public:
  // `multi`: the job may span more than one node (--nnodes MAX > 1). `in_place`: recovery in
  // place (see above).
  RestartPolicy(int64_t max_restarts, int64_t max_nodes, bool multi, bool in_place = false)
      : max_restarts_(max_restarts), max_nodes_(max_nodes), multi_(multi), in_place_(in_place) {}

  // `restarts`: the group restarts so far (in place: this node's replacements so far).
  RestartDecision decide(const GroupEnd& end, int restarts) const;
  // From now on failures restart the group (the workers turned out not to recover in place).
  void fallBackToRestart() { in_place_ = false; }

  // The Store failed while the launcher acted on `decided` (telling the other nodes of a failure,
  // announcing this node for the next round): the job cannot go on. Keeps `decided.what`.
  RestartDecision storeLost(RestartDecision decided, const std::string& error) const;

  // Node 0 only: whether a group of `group_size` nodes has room for more (--nnodes MAX).
  bool hasRoom(size_t group_size) const { return static_cast<int64_t>(group_size) < max_nodes_; }
  // Node 0 only: the nodes waiting in the next round to admit into the running group (node ids,
  // ascending; `group` ascending). An id already in the group is not admitted: a returning host
  // whose loss is not noticed yet, or a duplicate --node-rank; the next restart sorts that out
  // without stopping a healthy group. Empty: do not re-form.
  std::vector<int64_t> toAdmit(const std::vector<int64_t>& group,
                               const std::vector<int64_t>& waiting) const;

 private:
  int64_t max_restarts_;
  int64_t max_nodes_;
  bool multi_;
  bool in_place_;
};

}  // namespace cumulus::launch
