#pragma once
// The supervision loop of one generation: watches this node's workers until their group ends and
// says how (GroupEnd, restart_policy.h). Its parts, each small:
//   - StopWatch: a stop the launcher was asked for (its signal handler) or a preemption notice
//     (the --preemption-notice source, polled at most every 500 ms);
//   - reaping: the workers' exit statuses, read by summarizeExits;
//   - the group protocol over the Store (group_store.h), every 200 ms in a multi-node job:
//     another node's failure, node 0 re-forming the group to admit waiting nodes;
//   - the agent's console lines (agent_console.h).
// With recovery in place (options.recovery) a failed worker still ends run() (kWorkerFailed): the
// launcher replaces it and calls run() again; node 0 re-forms nothing, and a node that leaves
// after a notice marks itself done so that the others go on.
// When the job ends here (a signal, a notice, every worker finished) the loop stops and reaps the
// workers itself and returns kExit with the job's exit code; on a failure or a regroup it leaves
// them running for the launcher, which acts on the restart policy's decision.
//
// Used from the launcher's one thread; not thread-safe.

#include <chrono>
#include <optional>
#include <string>

#include "base/clock.h"
#include "launch/agent_console.h"
#include "launch/job_setup.h"
#include "launch/options.h"
#include "launch/preemption_notice.h"
#include "launch/restart_policy.h"
#include "launch/worker_group.h"

namespace cumulus::launch {

// Tells when to stop: the launcher's stop signal first, else the notice source, polled no more
// often than `interval`.
class StopWatch {
 public:
  struct Request {
    int signal = 0;         // SIGTERM for a preemption notice or signal; another: stop now
    std::string detail;     // the notice that asked for the stop ("" for a signal)
    std::string rebalance;  // a rebalance recommendation to pass on to the workers, if any
  };
  // `stop_signal` returns the signal the launcher was asked to stop by, or 0. `notice` may be
  // null. The first poll asks the notice source at once.
  StopWatch(int (*stop_signal)(), NoticeSource* notice, std::chrono::milliseconds interval,
            const base::Clock& clock)
      : stop_signal_(stop_signal), notice_(notice), interval_(interval), clock_(clock) {}
  // Non-blocking, except for the notice source's own poll (an HTTP request for a cloud source,
  // bounded by its timeout).
  Request poll();

 private:
  int (*stop_signal_)();
  NoticeSource* notice_;
  std::chrono::milliseconds interval_;
  const base::Clock& clock_;
  std::optional<base::Clock::TimePoint> next_poll_;
};

class Supervisor {
 public:
  // Everything passed in outlives the Supervisor.
  Supervisor(const LaunchOptions& options, Job& job, const RestartPolicy& policy,
             AgentConsole& console, int (*stop_signal)())
      : options_(options),
        job_(job),
        policy_(policy),
        console_(console),
        stop_signal_(stop_signal) {}

  // Blocks until `group` ends; see above. A Store failure is kStoreLost, except while telling
  // the others that this node finished, where it throws cumulus::CommError.
  GroupEnd run(WorkerGroup& group);

 private:
  GroupEnd stopForPreemption(WorkerGroup& group, const std::string& notice);
  GroupEnd stopForSignal(WorkerGroup& group, int sig);
  // Recovery in place, after a preemption stop: tells the others this node left (best effort).
  void leaveInPlace(WorkerGroup& group);
  // Every worker exited, each 0 or 75.
  GroupEnd finish(WorkerGroup& group, bool any_preempted);
  // In place: whether any member of the group is left for a replacement to join (end.members_left,
  // end.no_members), from the Store's membership.
  void checkMembersLeft(WorkerGroup& group, const std::vector<ExitStatus>& statuses, GroupEnd& end);
  // Another node's news in the Store, if any.
  std::optional<GroupEnd> checkStore(WorkerGroup& group);

  const LaunchOptions& options_;
  Job& job_;
  const RestartPolicy& policy_;
  AgentConsole& console_;
  int (*stop_signal_)();
  base::SteadyClock clock_;
};

}  // namespace cumulus::launch
