#include "launch/agent_console.h"

#include <cstdarg>

#include "launch/worker_group.h"
#include "launch/worker_process.h"

namespace cumulus::launch {

void AgentConsole::say(const char* format, ...) {
  std::fputs("cumulus-run: ", out_);
  va_list args;
  va_start(args, format);
  std::vfprintf(out_, format, args);
  va_end(args);
  std::fputc('\n', out_);
}

void AgentConsole::note(const std::string& text) { say("%s", text.c_str()); }

void AgentConsole::setupError(const std::string& error) { say("error: %s", error.c_str()); }

void AgentConsole::rendezvousFailed(const std::string& error) {
  say("error: rendezvous failed: %s", error.c_str());
}

void AgentConsole::started(const std::string& run_id, const std::string& nodes,
                           int64_t nproc_per_node, const std::string& store_endpoint,
                           const std::string& bind_host, const std::string& run_dir) {
  say("run %s, %s node(s) x %lld worker(s), store %s, data plane on %s, logs %s", run_id.c_str(),
      nodes.c_str(), static_cast<long long>(nproc_per_node), store_endpoint.c_str(),
      bind_host.c_str(), run_dir.c_str());
}

void AgentConsole::pollingNotices(const std::string& source) {
  say("polling %s for preemption notices", source.c_str());
}

void AgentConsole::noticeWarning(const std::string& line) {
  std::fprintf(out_, "%s\n", line.c_str());
}

void AgentConsole::parameterServer(const std::string& endpoint) {
  say("parameter server (funnel) on %s", endpoint.c_str());
}

void AgentConsole::generationFormed(int64_t generation, const std::string& node_ids,
                                    int64_t world_size, int64_t node_rank, int64_t first_rank,
                                    int64_t last_rank) {
  say("generation %lld: nodes %s, world size %lld; this node is node rank %lld (ranks %lld-%lld)",
      static_cast<long long>(generation), node_ids.c_str(), static_cast<long long>(world_size),
      static_cast<long long>(node_rank), static_cast<long long>(first_rank),
      static_cast<long long>(last_rank));
}

void AgentConsole::metricsExposed(const std::string& host, int port, bool every_address) {
  const std::string where =
      every_address ? "every address of this machine" : "an address other machines reach";
  say("warning: --metrics-host %s serves this job's dashboard and metrics (its run id, loss and "
      "every record its workers write) on %s, port %d, with no authentication: anyone who can "
      "reach that port can read them; keep the default 127.0.0.1 to serve this machine alone (an "
      "SSH tunnel reaches it from elsewhere), or firewall the port",
      host.c_str(), where.c_str(), port);
}

void AgentConsole::inPlaceFallsBack() {
  say("launch.recovery in_place is not possible with comm.algorithm funnel (its parameter server "
      "serves one world size); a failure restarts the group instead");
}

void AgentConsole::workersNotInPlace(int64_t generation) {
  say("the workers of generation %lld did not form an in-place group (the program does not "
      "recover in place, or it failed before it could); restarting the group instead",
      static_cast<long long>(generation));
}

void AgentConsole::joiningRunningGroup(int64_t generation, const std::string& node_ids,
                                       int64_t workers) {
  say("the group of generation %lld (nodes %s) is already running; this node's %lld worker(s) "
      "join it in place",
      static_cast<long long>(generation), node_ids.c_str(), static_cast<long long>(workers));
}

void AgentConsole::workerReplaced(int rank, const std::string& member, const std::string& status,
                                  const std::string& replacement, int restarts,
                                  int64_t max_restarts) {
  say("rank %d (member %s) died (%s); the group goes on without it; starting a replacement "
      "(member %s), restart %d of %lld",
      rank, member.c_str(), status.c_str(), replacement.c_str(), restarts,
      static_cast<long long>(max_restarts));
}

void AgentConsole::markGoneFailed(const std::string& member, const std::string& error) {
  say("could not tell the group that member %s is gone: %s", member.c_str(), error.c_str());
}

void AgentConsole::rebalance(const std::string& detail) {
  say("%s; asking the workers to checkpoint now and keep training", detail.c_str());
}

void AgentConsole::preemptionNotice(const std::string& detail, double grace) {
  say("preemption notice (%s); asking the workers to checkpoint and stop within %.1f s",
      detail.empty() ? "SIGTERM" : detail.c_str(), grace);
}

void AgentConsole::stoppingOnSignal(int sig) {
  say("received %s, stopping workers", signalName(sig).c_str());
}

void AgentConsole::allFinished(int64_t workers) {
  say("all %lld worker(s) finished", static_cast<long long>(workers));
}

void AgentConsole::finishedBeforePreemption() {
  say("the workers finished before they could be preempted");
}

void AgentConsole::finishedAfterLeaving(const std::string& ranks, int64_t finished) {
  say("rank(s) %s stopped at a preemption notice (exit 75) and the other %lld worker(s) finished "
      "training",
      ranks.c_str(), static_cast<long long>(finished));
}

void AgentConsole::preempted(const std::string& what, double seconds) {
  say("%s (notice to exit %.2f s); launch the same command again to resume", what.c_str(), seconds);
}

void AgentConsole::preemptedAndKilled(double grace) {
  say("preempted, but the workers had not exited after the %.1f s grace and were killed; the "
      "newest valid checkpoint is the one before",
      grace);
}

void AgentConsole::preemptedBeforeCheckpoint(int rank, const std::string& status, double seconds) {
  say("preempted before the workers could checkpoint (rank %d: %s; notice to exit %.2f s); the "
      "next launch resumes from the newest valid checkpoint",
      rank, status.c_str(), seconds);
}

void AgentConsole::regroupUnreadable(const std::string& error) {
  say("could not read whether node 0 re-forms the group (%s); treating the stop as a preemption",
      error.c_str());
}

void AgentConsole::finishUnconfirmed(int64_t generation, const std::string& error) {
  say("not every node reported it finished generation %lld: %s", static_cast<long long>(generation),
      error.c_str());
}

void AgentConsole::preemptedInRendezvous(int64_t generation) {
  say("preemption notice (SIGTERM) during the rendezvous of generation %lld; no worker was "
      "running; launch the same command again to resume",
      static_cast<long long>(generation));
}

void AgentConsole::signalInRendezvous(int sig) {
  say("received %s during the rendezvous", signalName(sig).c_str());
}

void AgentConsole::roundEnded(int exit_code, const std::string& reason) {
  const char* what = exit_code == 0                ? "done"
                     : exit_code == kExitPreempted ? "preempted"
                                                   : "giving up";
  say("%s: %s", what, reason.c_str());
}

void AgentConsole::endWaitingFailed(int64_t generation, const std::string& error) {
  say("could not tell the nodes waiting for generation %lld that the job ended: %s",
      static_cast<long long>(generation), error.c_str());
}

void AgentConsole::regrouping(const std::string& detail, double preemption_grace) {
  say("%s: the workers checkpoint and stop (as for a preemption, within --preemption-grace "
      "%.1f s), then the group forms again; not counted as a restart",
      detail.c_str(), preemption_grace);
}

void AgentConsole::announceFailed(int64_t generation, const std::string& error) {
  say("could not announce this node for generation %lld: %s", static_cast<long long>(generation),
      error.c_str());
}

void AgentConsole::stoppingGroup(const std::string& what) {
  say("%s; stopping the group", what.c_str());
}

void AgentConsole::noMembersLeft(const std::string& what, const std::string& why) {
  say("%s, and %s; stopping the group to restart it", what.c_str(),
      why.empty() ? "no member of the group is left to go on in place" : why.c_str());
}

void AgentConsole::failureUnconfirmed(int64_t generation, const std::string& error) {
  say("not every node confirmed it saw the failure of generation %lld: %s",
      static_cast<long long>(generation), error.c_str());
}

void AgentConsole::storeLost(const std::string& store_endpoint, const std::string& error) {
  // Like torchrun's c10d store host: the rendezvous lives on node 0 and dies with it.
  say("giving up: the rendezvous Store on node 0 (%s) is unreachable: %s; node 0 hosts the "
      "Store, so the job cannot go on without it: launch it again on every node to resume from "
      "the newest checkpoint",
      store_endpoint.c_str(), error.c_str());
}

void AgentConsole::givingUp(const RestartDecision& decision, int64_t max_restarts,
                            const std::string& log, const std::string& error) {
  using Why = RestartDecision::Why;
  const char* what = decision.what.c_str();
  if (decision.why == Why::kOtherNodeGaveUp) {
    say("giving up: %s, and that node gave up; see %s", what, log.c_str());
  } else if (decision.why == Why::kOtherNodePermanent) {
    say("giving up: %s, an error that a restart would repeat; that node's launcher names it", what);
  } else if (decision.why == Why::kCannotExecute) {
    const std::string prefix = "cumulus-run: ";
    const std::string reason =
        error.empty() ? "the command, or a program it runs, cannot be executed (not found, or "
                        "not executable)"
        : error.rfind(prefix, 0) == 0 ? error.substr(prefix.size())
                                      : error;
    say("giving up: %s: %s; fix the command and launch again (see %s)", what, reason.c_str(),
        log.c_str());
  } else if (decision.why == Why::kRepeatable && !error.empty()) {
    say("giving up: %s, an error that a restart would repeat, so none was tried: %s (see %s)", what,
        error.c_str(), log.c_str());
  } else if (decision.why == Why::kRepeatable) {
    say("giving up: %s, an error in the command or the experiment that a restart would repeat; "
        "fix it and launch again (see %s)",
        what, log.c_str());
  } else {
    say("giving up: %s and no restarts are left (--max-restarts %lld); see %s", what,
        static_cast<long long>(max_restarts), log.c_str());
  }
}

void AgentConsole::restarting(int restarts, int64_t max_restarts) {
  say("restarting the group (restart %d of %lld)", restarts, static_cast<long long>(max_restarts));
}

}  // namespace cumulus::launch
