#include "launch/launcher.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include "comm/error.h"
#include "launch/agent_console.h"
#include "launch/job_setup.h"
#include "launch/restart_policy.h"
#include "launch/supervisor.h"
#include "launch/worker_group.h"
#include "launch/worker_process.h"

namespace cumulus::launch {
namespace {

// The one piece of process-wide state: a signal handler can reach nothing else.
std::atomic<int> g_stop_signal{0};

int stopSignal() { return g_stop_signal.load(); }
bool stopRequested() { return g_stop_signal.load() != 0; }

std::vector<int64_t> idsOf(const Round& round) {
  std::vector<int64_t> ids;
  for (const RoundNode& n : round.nodes) ids.push_back(n.node_id);
  return ids;
}

}  // namespace

struct Launcher::State {
  explicit State(FILE* out) : console(out) {}
  AgentConsole console;
  std::unique_ptr<Job> job;
  std::optional<RestartPolicy> policy;
  int64_t generation = 0;  // of the current (or last) group
};

Launcher::Launcher(LaunchOptions options, FILE* console)
    : options_(std::move(options)), console_(console), state_(std::make_unique<State>(console)) {
  // Line by line even into a file or a pipe, so what the agent says shows up as it happens.
  std::setvbuf(console_, nullptr, _IOLBF, 0);
}

Launcher::~Launcher() = default;

void Launcher::requestStop(int sig) { g_stop_signal.store(sig); }

LaunchReport Launcher::run() {
  AgentConsole& console = state_->console;
  try {
    return runOrThrow();
  } catch (const SetupError& e) {
    console.setupError(e.what());
  } catch (const comm::CommError& e) {
    console.rendezvousFailed(e.what());
  } catch (const std::exception& e) {
    console.setupError(e.what());
  }
  LaunchReport report;
  report.exit_code = 2;
  return report;
}

LaunchReport Launcher::runOrThrow() {
  State& st = *state_;
  st.job = setUpJob(options_, st.console, &stopRequested);
  st.policy.emplace(options_.max_restarts, options_.max_nodes, st.job->multi);
  Job& job = *st.job;
  LaunchReport report;
  std::vector<int64_t> previous_group;
  for (int64_t next = 0;; next = st.generation + 1) {
    Round round;
    try {
      round = job.rdzv->join(next, report.restarts);
    } catch (const comm::CommError& e) {
      if (next == 0) throw;  // never reached the Store: a set-up error ("rendezvous failed")
      st.console.storeLost(job.store_endpoint, e.what());
      report.exit_code = 1;
      return report;
    }
    if (round.outcome != Round::Outcome::kClosed) {
      endBeforeGroup(round, report);
      return report;
    }
    st.generation = round.generation;
    report.restarts = static_cast<int>(round.restarts);
    std::unique_ptr<WorkerGroup> group = startGroup(round, report.restarts);
    if (!previous_group.empty() && previous_group != group->node_ids) {
      job.errors->regroup(st.generation, previous_group, group->node_ids, round.worldSize());
    }
    previous_group = group->node_ids;

    const GroupEnd end = Supervisor(options_, job, *st.policy, st.console, &stopSignal).run(*group);
    if (!afterGroup(*group, end, report)) return report;
  }
}

void Launcher::endBeforeGroup(const Round& round, LaunchReport& report) {
  State& st = *state_;
  if (round.outcome == Round::Outcome::kEnded) {
    st.console.roundEnded(round.exit_code, round.reason);
    report.exit_code = round.exit_code;
    return;
  }
  const int sig = g_stop_signal.load();
  if (sig == SIGTERM) {  // a preemption notice with no worker running: nothing to save
    st.console.preemptedInRendezvous(round.generation);
    report.preemptions++;
    report.exit_code = kExitPreempted;
  } else {
    st.console.signalInRendezvous(sig);
    report.exit_code = 128 + sig;
  }
  endWaiting(*st.job, st.console, round.generation, report.exit_code,
             "node 0's launcher was stopped by " + signalName(sig));
}

std::unique_ptr<WorkerGroup> Launcher::startGroup(const Round& round, int restarts) {
  const LaunchOptions& o = options_;
  State& st = *state_;
  Job& job = *st.job;
  auto group = std::make_unique<WorkerGroup>(console_);
  group->generation = round.generation;
  group->node_ids = idsOf(round);
  const std::string gen = std::to_string(round.generation);
  const int64_t world_size = round.worldSize();
  const int64_t node_rank = round.nodeRankOf(o.node_rank);
  const int64_t first_rank = round.firstRankOf(o.node_rank);
  if (job.multi) {
    st.console.generationFormed(round.generation, round.nodeIds(), world_size, node_rank,
                                first_rank, first_rank + o.nproc_per_node - 1);
  }
  if (o.host_parameter_server) {
    prepareParameterServer(job, st.console, round.generation, world_size, toMs(o.rdzv_timeout));
  }

  const std::string gen_dir = job.run_dir + "/gen" + gen;
  std::error_code ec;
  std::filesystem::create_directories(gen_dir, ec);
  group->mux.watchFor(kPreemptedMarker);
  // The worker's own preemption deadline ends a little before ours, so that a worker whose
  // checkpoint hangs exits 75 by itself rather than being SIGKILLed by the launcher.
  const double worker_grace =
      std::max(0.1, o.preemption_grace - std::min(2.0, o.preemption_grace / 5));
  for (int64_t local = 0; local < o.nproc_per_node; ++local) {
    Worker w;
    w.local_rank = static_cast<int>(local);
    w.rank = static_cast<int>(first_rank + local);
    w.log_path = gen_dir + "/rank" + std::to_string(w.rank) + ".log";
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(w.rank)},
        {"LOCAL_RANK", std::to_string(local)},
        {"WORLD_SIZE", std::to_string(world_size)},
        {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"GROUP_RANK", std::to_string(node_rank)},
        {"ROLE_RANK", std::to_string(w.rank)},
        {"MASTER_ADDR", job.store_host},
        {"MASTER_PORT", std::to_string(job.store_port)},
        {"CUMULUS_RUN_ID", o.run_id},
        {"CUMULUS_RESTART_COUNT", std::to_string(restarts)},
        {"CUMULUS_GENERATION", gen},
        {"CUMULUS_JOB_TOKEN", job.token},
        {"CUMULUS_LOG_DIR", gen_dir},
        {"CUMULUS_BIND_HOST", job.bind_host},
        {"CUMULUS_PREEMPTION_GRACE", std::to_string(worker_grace)},
    };
    if (!job.ps_endpoint.empty()) env.emplace_back("CUMULUS_PS_ENDPOINT", job.ps_endpoint);
    w.process = std::make_unique<WorkerProcess>(o.command, env);
    w.process->start();
    group->mux.add(w.rank, w.process->outputFd(), w.log_path);
    group->workers.push_back(std::move(w));
  }
  return group;
}

bool Launcher::afterGroup(WorkerGroup& group, const GroupEnd& end, LaunchReport& report) {
  State& st = *state_;
  const RestartDecision decision = st.policy->decide(end, report.restarts);
  switch (decision.action) {
    case RestartDecision::Action::kExit:
      report.exit_code = decision.exit_code;
      if (decision.exit_code == kExitPreempted) report.preemptions++;
      endWaiting(*st.job, st.console, st.generation + 1, decision.exit_code, end.detail);
      return false;
    case RestartDecision::Action::kRegroup:
      regroup(group, decision);
      return true;
    case RestartDecision::Action::kRestart:
    case RestartDecision::Action::kGiveUp:
      break;
  }
  return restartAfter(group, end, decision, report);
}

void Launcher::regroup(WorkerGroup& group, const RestartDecision& decision) {
  State& st = *state_;
  // SIGTERM is the workers' preemption notice: they agree on a step, checkpoint it and exit 75,
  // so admitting a node costs a restart of the processes but no training progress.
  st.console.regrouping(decision.what, options_.preemption_grace);
  try {
    st.job->rdzv->announceRejoin(st.generation + 1);
  } catch (const comm::CommError& e) {
    // Without the announcement node 0 closes the next round after the last call, maybe without
    // this node; the group still forms, so go on.
    st.console.announceFailed(st.generation + 1, e.what());
  }
  stopWorkers(group.workers, group.mux, options_.preemption_grace);
}

// One failure stops the whole group (on every node) and restarts it under a new generation, if
// the policy allows and node 0's Store is there. Returns false, with report.exit_code set, when
// the job gives up.
bool Launcher::restartAfter(WorkerGroup& group, const GroupEnd& end, RestartDecision decision,
                            LaunchReport& report) {
  const LaunchOptions& o = options_;
  State& st = *state_;
  Job& job = *st.job;
  const int64_t g = st.generation;
  const Worker* failed =
      end.kind == GroupEnd::Kind::kWorkerFailed ? group.byRank(end.failed_rank) : nullptr;
  if (failed) {
    report.failed_rank = failed->rank;
    report.failure = end.failed_status.describe();
    job.errors->workerFailed(g, failed->rank, failed->local_rank, o.node_rank,
                             failed->process->pid(), end.failed_status, failed->log_path);
  }
  if (decision.publish_failure) {
    try {
      job.group_store->recordFailure(g, decision.what);
    } catch (const comm::CommError& e) {
      decision = st.policy->storeLost(decision, e.what());
    }
  }
  st.console.stoppingGroup(decision.what);
  if (job.multi && decision.action == RestartDecision::Action::kRestart) {
    // Before stopping (up to --stop-grace): the host waits for this node beyond the last call.
    try {
      job.rdzv->announceRejoin(g + 1);
    } catch (const comm::CommError& e) {
      decision = st.policy->storeLost(decision, e.what());
    }
  }
  stopWorkers(group.workers, group.mux, o.stop_grace);
  const bool store_lost = decision.why == RestartDecision::Why::kStoreLost;
  const bool giving_up = decision.action == RestartDecision::Action::kGiveUp;
  if (job.multi && !store_lost) {
    // Node 0 keeps the Store up until every agent has seen the failure, so none of them dies of
    // a vanished Store instead of reporting it. A lost node never answers: wait a bounded time.
    try {
      job.group_store->markStopped(g, o.node_rank);
      if (job.host && giving_up) {
        job.group_store->waitStopped(g, group.node_ids,
                                     toMs(std::min(o.rdzv_timeout, o.stop_grace + 5.0)));
      }
    } catch (const comm::CommError& e) {
      // Best effort: the failure is reported below whether or not the others saw it.
      st.console.failureUnconfirmed(g, e.what());
    }
  }
  if (store_lost) {
    st.console.storeLost(job.store_endpoint, decision.store_error);
    report.exit_code = decision.exit_code;
    return false;
  }
  if (giving_up) {
    st.console.givingUp(decision, o.max_restarts, failed ? failed->log_path : job.errors->path());
    report.exit_code = decision.exit_code;
    endWaiting(job, st.console, g + 1, 1, "gave up after " + decision.what);
    return false;
  }
  report.restarts = decision.restarts;
  st.console.restarting(report.restarts, o.max_restarts);
  return true;
}

}  // namespace cumulus::launch
