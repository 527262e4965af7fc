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

#include "base/env_names.h"
#include "comm/error.h"
#include "comm/store_keys.h"
#include "launch/agent_console.h"
#include "launch/job_metrics.h"
#include "launch/job_setup.h"
#include "launch/metrics_server.h"
#include "launch/restart_policy.h"
#include "launch/supervisor.h"
#include "launch/worker_group.h"
#include "launch/worker_process.h"

namespace cumulus::launch {
namespace {

namespace env = base::env;  // the variables the workers are started with

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
  // --metrics-port on node 0: the job's live view and its endpoint (declared after the job, so
  // the endpoint stops before the Store client it reads goes away).
  std::unique_ptr<JobMetrics> metrics;
  std::unique_ptr<MetricsServer> metrics_server;
  bool live_metrics = false;  // the workers send their records and status (CUMULUS_LIVE_METRICS)

  void event(const std::string& what, int64_t world_size, const std::string& cause = "",
             int64_t rank = -1) {
    if (metrics) metrics->agentEvent(what, generation, world_size, cause, rank);
  }
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
    LaunchReport report = runOrThrow();
    if (state_->metrics) {
      const int code = report.exit_code;
      if (code == 0) state_->event("finished", 0);
      state_->metrics->setState(code == 0                ? "finished"
                                : code == kExitPreempted ? "preempted"
                                                         : "failed");
      state_->metrics_server->pollNow();
    }
    return report;
  } catch (const JobSetupError& e) {
    console.setupError(e.what());
  } catch (const cumulus::CommError& e) {
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
  const bool asked_in_place = options_.recovery == Recovery::kInPlace;
  // The funnel's parameter server is built for one world size: a group that shrinks in place
  // would be left without one.
  if (asked_in_place && options_.host_parameter_server) options_.recovery = Recovery::kRestart;
  if (options_.metrics_port != 0 && options_.node_rank != 0) {
    st.console.note("--metrics-port " + std::to_string(options_.metrics_port) +
                    " is node 0's to serve: node " + std::to_string(options_.node_rank) +
                    " serves none, and its workers send their metrics to node 0");
  }
  st.job = setUpJob(options_, st.console, &stopRequested);
  if (asked_in_place && options_.recovery != Recovery::kInPlace) st.console.inPlaceFallsBack();
  st.policy.emplace(options_.max_restarts, options_.max_nodes, st.job->multi,
                    options_.recovery == Recovery::kInPlace);
  Job& job = *st.job;
  startMetrics();
  LaunchReport report;
  std::vector<int64_t> previous_group;
  for (int64_t next = 0;; next = st.generation + 1) {
    Round round;
    try {
      round = job.rdzv->join(next, report.restarts);
    } catch (const cumulus::CommError& e) {
      if (next == 0) throw;  // never reached the Store: a set-up error ("rendezvous failed")
      st.console.storeLost(job.store_endpoint, e.what());
      report.exit_code = 1;
      return report;
    }
    const bool joining = round.outcome == Round::Outcome::kRunning;
    if (round.outcome != Round::Outcome::kClosed && !joining) {
      endBeforeGroup(round, report);
      return report;
    }
    st.generation = round.generation;
    report.restarts = static_cast<int>(round.restarts);
    std::unique_ptr<WorkerGroup> group;
    try {
      group = startGroup(round, report.restarts, joining);
    } catch (const cumulus::CommError& e) {
      // The round formed, so the Store was there: node 0 went away while this node started its
      // workers (the member ids come from the Store). The workers started so far die with `group`.
      st.console.storeLost(job.store_endpoint, e.what());
      report.exit_code = 1;
      return report;
    }
    st.event(joining ? "join" : "start", group->world_size);
    if (!joining && !previous_group.empty() && previous_group != group->node_ids) {
      job.errors->regroup(st.generation, previous_group, group->node_ids, round.worldSize());
    }
    previous_group = group->node_ids;

    const GroupEnd end = supervise(*group, report);
    if (!afterGroup(*group, end, report)) return report;
  }
}

GroupEnd Launcher::supervise(WorkerGroup& group, LaunchReport& report) {
  State& st = *state_;
  for (;;) {
    GroupEnd end = Supervisor(options_, *st.job, *st.policy, st.console, &stopSignal).run(group);
    // A permanent failure (exit 2, 127) ends the job either way.
    const bool permanent =
        end.kind == GroupEnd::Kind::kWorkerFailed && isPermanentFailure(end.failed_status);
    const bool failed = !permanent && (end.kind == GroupEnd::Kind::kWorkerFailed ||
                                       end.kind == GroupEnd::Kind::kRemoteFailure);
    if (failed && options_.recovery == Recovery::kInPlace && !workersRunInPlace(group)) {
      st.console.workersNotInPlace(group.generation);
      st.policy->fallBackToRestart();
      options_.recovery = Recovery::kRestart;
    }
    if (end.kind != GroupEnd::Kind::kWorkerFailed) return end;
    const RestartDecision decision = st.policy->decide(end, report.restarts);
    if (decision.action != RestartDecision::Action::kReplace) return end;
    if (std::optional<GroupEnd> lost = replaceWorker(group, end, decision, report)) return *lost;
  }
}

bool Launcher::workersRunInPlace(const WorkerGroup& group) {
  try {
    return state_->job->group_store->runsInPlace(group.generation, group.world_size);
  } catch (const cumulus::CommError&) {
    return true;  // the Store is gone: the in-place path reports that as it does now
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

std::unique_ptr<WorkerGroup> Launcher::startGroup(const Round& round, int restarts, bool joining) {
  const LaunchOptions& o = options_;
  State& st = *state_;
  Job& job = *st.job;
  auto group = std::make_unique<WorkerGroup>(console_);
  group->generation = round.generation;
  group->node_ids = idsOf(round);
  group->world_size = round.worldSize();
  group->joining = joining;
  group->node_rank = joining ? o.node_rank : round.nodeRankOf(o.node_rank);
  const int64_t first_rank = joining ? 0 : round.firstRankOf(o.node_rank);
  if (joining) {
    job.group_store->addJoined(round.generation, o.node_rank);  // node 0 waits for us at the end
    st.console.joiningRunningGroup(round.generation, round.nodeIds(), o.nproc_per_node);
  } else if (job.multi) {
    st.console.generationFormed(round.generation, round.nodeIds(), group->world_size,
                                group->node_rank, first_rank, first_rank + o.nproc_per_node - 1);
  }
  if (o.host_parameter_server) {
    prepareParameterServer(job, st.console, round.generation, group->world_size,
                           toMs(o.rdzv_timeout));
  }
  group->master_port = prepareMasterPort(job, round.generation, toMs(o.rdzv_timeout));
  if (!st.metrics_server)
    st.live_metrics = job.store->tryGet(comm::metricsServingKey()).has_value();

  group->log_dir = job.run_dir + "/gen" + std::to_string(round.generation);
  std::error_code ec;
  std::filesystem::create_directories(group->log_dir, ec);
  group->mux.watchFor(kPreemptedMarker);
  group->mux.watchFor(kErrorMarker);
  group->mux.watchFor(kCannotExecuteMarker);
  for (int64_t local = 0; local < o.nproc_per_node; ++local) {
    Worker w;
    w.local_rank = static_cast<int>(local);
    w.rank = static_cast<int>(first_rank + local);
    group->workers.push_back(std::move(w));
    launchWorker(*group, group->workers.back(), joining, restarts);
  }
  return group;
}

std::vector<std::pair<std::string, std::string>> Launcher::workerEnv(const WorkerGroup& group,
                                                                     const Worker& w, bool joiner,
                                                                     int restarts) const {
  const LaunchOptions& o = options_;
  const Job& job = *state_->job;
  // The worker's own preemption deadline ends a little before ours, so that a worker whose
  // checkpoint hangs exits 75 by itself rather than being SIGKILLed by the launcher.
  const double worker_grace =
      std::max(0.1, o.preemption_grace - std::min(2.0, o.preemption_grace / 5));
  // A late node's joiners have no rank yet: RANK and WORLD_SIZE are placeholders that the worker
  // ignores (CUMULUS_JOIN), kept valid for readers of the torchrun environment.
  const int64_t world_size =
      group.joining ? std::max(group.world_size, o.nproc_per_node) : group.world_size;
  std::vector<std::pair<std::string, std::string>> env = {
      {env::kRank, std::to_string(w.rank)},
      {env::kLocalRank, std::to_string(w.local_rank)},
      {env::kWorldSize, std::to_string(world_size)},
      {env::kLocalWorldSize, std::to_string(o.nproc_per_node)},
      {env::kGroupRank, std::to_string(group.node_rank)},
      {env::kRoleRank, std::to_string(w.rank)},
      {env::kMasterAddr, job.store_host},
      {env::kMasterPort, std::to_string(group.master_port)},
      {env::kStore, job.store_endpoint},
      {env::kRunId, o.run_id},
      {env::kRestartCount, std::to_string(restarts)},
      {env::kGeneration, std::to_string(group.generation)},
      {env::kJobToken, job.token},
      {env::kLogDir, group.log_dir},
      {env::kBindHost, job.bind_host},
      {env::kPreemptionGrace, std::to_string(worker_grace)},
  };
  if (!job.ps_endpoint.empty()) env.emplace_back(env::kPsEndpoint, job.ps_endpoint);
  if (state_->live_metrics) env.emplace_back(env::kLiveMetrics, "1");
  if (o.recovery == Recovery::kInPlace) {
    env.emplace_back(env::kRecovery, recoveryName(o.recovery));
    env.emplace_back(env::kMemberId, w.member_id);
    env.emplace_back(env::kMinWorkers, std::to_string(minWorkers(o)));
    env.emplace_back(env::kMaxWorkers, std::to_string(o.max_nodes * o.nproc_per_node));
    if (joiner) env.emplace_back(env::kJoin, "1");
  }
  return env;
}

void Launcher::launchWorker(WorkerGroup& group, Worker& w, bool joiner, int restarts) {
  const LaunchOptions& o = options_;
  std::string name = "rank" + std::to_string(w.rank);
  std::string label;  // the console prefix: "rank<r>" unless a late joiner
  if (o.recovery == Recovery::kInPlace) {
    const int64_t n =
        state_->job->group_store->nextMember(group.generation, o.node_rank, w.local_rank);
    w.member_id =
        std::to_string(o.node_rank) + "." + std::to_string(w.local_rank) + "." + std::to_string(n);
    if (group.joining) {
      name = "member" + w.member_id;
      label = name;
    } else if (n > 0) {
      name += "." + std::to_string(n);  // a replacement: the dead one's log stays
    }
  }
  w.log_path = group.log_dir + "/" + name + ".log";
  w.process = std::make_unique<WorkerProcess>(o.command, workerEnv(group, w, joiner, restarts));
  w.process->start();
  group.mux.add(w.rank, w.process->outputFd(), w.log_path, label);
}

// Recovery in place: the worker of `end` died. The survivors re-form without it as soon as it is
// marked gone, so that comes first; then the record, and a replacement that joins them in the
// same slot. Returns how the group ended when the Store failed, else nothing.
std::optional<GroupEnd> Launcher::replaceWorker(WorkerGroup& group, const GroupEnd& end,
                                                const RestartDecision& decision,
                                                LaunchReport& report) {
  State& st = *state_;
  Job& job = *st.job;
  Worker* dead = nullptr;
  for (Worker& w : group.workers) {
    if (w.rank == end.failed_rank) dead = &w;
  }
  const std::string why = end.failed_status.describe();
  std::optional<std::string> store_error;
  try {
    job.group_store->markGone(group.generation, dead->member_id, why);
  } catch (const cumulus::CommError& e) {
    st.console.markGoneFailed(dead->member_id, e.what());
    store_error = e.what();
  }
  report.failed_rank = dead->rank;
  report.failure = why;
  job.errors->workerFailed(group.generation, dead->rank, dead->local_rank, options_.node_rank,
                           dead->process->pid(), end.failed_status, dead->log_path);
  group.mux.finish(dead->rank);
  const std::string old_member = dead->member_id;
  try {
    if (!store_error) launchWorker(group, *dead, /*joiner=*/true, decision.restarts);
  } catch (const cumulus::CommError& e) {
    store_error = e.what();
  }
  if (store_error) {
    GroupEnd lost;
    lost.kind = GroupEnd::Kind::kStoreLost;
    lost.detail = *store_error;
    return lost;
  }
  report.restarts = decision.restarts;
  st.event("failure", group.world_size, why, dead->rank);
  st.event("join", group.world_size, "replacement", dead->rank);
  st.console.workerReplaced(dead->rank, old_member, why, dead->member_id, report.restarts,
                            options_.max_restarts);
  return std::nullopt;
}

bool Launcher::afterGroup(WorkerGroup& group, const GroupEnd& end, LaunchReport& report) {
  State& st = *state_;
  const RestartDecision decision = st.policy->decide(end, report.restarts);
  switch (decision.action) {
    case RestartDecision::Action::kExit:
      report.exit_code = decision.exit_code;
      if (decision.exit_code == kExitPreempted) {
        report.preemptions++;
        st.event("preemption", group.world_size, end.detail);
      }
      endWaiting(*st.job, st.console, st.generation + 1, decision.exit_code, end.detail);
      return false;
    case RestartDecision::Action::kRegroup:
      regroup(group, decision);
      return true;
    case RestartDecision::Action::kRestart:
    case RestartDecision::Action::kGiveUp:
    case RestartDecision::Action::kReplace:  // not here: supervise() replaced the worker
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
  } catch (const cumulus::CommError& e) {
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
    st.event("failure", group.world_size, report.failure, failed->rank);
    job.errors->workerFailed(g, failed->rank, failed->local_rank, o.node_rank,
                             failed->process->pid(), end.failed_status, failed->log_path);
  }
  const bool permanent = decision.why == RestartDecision::Why::kRepeatable ||
                         decision.why == RestartDecision::Why::kCannotExecute ||
                         decision.why == RestartDecision::Why::kOtherNodePermanent;
  if (decision.publish_failure) {
    try {
      job.group_store->recordFailure(g, decision.what, permanent);
    } catch (const cumulus::CommError& e) {
      decision = st.policy->storeLost(decision, e.what());
    }
  }
  if (decision.why == RestartDecision::Why::kNoMembersLeft) {
    st.console.noMembersLeft(decision.what, decision.no_members);
  } else {
    st.console.stoppingGroup(decision.what);
  }
  if (job.multi && decision.action == RestartDecision::Action::kRestart) {
    // Before stopping (up to --stop-grace): the host waits for this node beyond the last call.
    try {
      job.rdzv->announceRejoin(g + 1);
    } catch (const cumulus::CommError& e) {
      decision = st.policy->storeLost(decision, e.what());
    }
  }
  if (permanent) {
    killWorkers(group.workers, group.mux);  // at once: the job is over, nothing is worth saving
  } else {
    stopWorkers(group.workers, group.mux, o.stop_grace);
  }
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
    } catch (const cumulus::CommError& e) {
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
    report.exit_code = decision.exit_code;
    endWaiting(job, st.console, g + 1, decision.exit_code, "gave up after " + decision.what);
    // Last, so that the job's final line names the error and where to read more.
    st.console.givingUp(decision, o.max_restarts, failed ? failed->log_path : job.errors->path(),
                        failed ? lastErrorLine(group.mux, failed->rank) : "");
    return false;
  }
  report.restarts = decision.restarts;
  st.event("restart", group.world_size, decision.what);
  st.console.restarting(report.restarts, o.max_restarts);
  return true;
}

// --metrics-port: node 0 serves the job's live view for as long as it runs; the workers of every
// node send theirs through the Store once node 0 says it serves.
void Launcher::startMetrics() {
  State& st = *state_;
  Job& job = *st.job;
  if (options_.metrics_port == 0 || !job.host) return;
  st.metrics = std::make_unique<JobMetrics>(options_.run_id);
  try {
    st.metrics_server = std::make_unique<MetricsServer>(
        options_.metrics_host, options_.metrics_port, *st.metrics, *job.store);
  } catch (const std::runtime_error& e) {
    throw JobSetupError(e.what());
  }
  job.store->set(comm::metricsServingKey(), "1");
  st.live_metrics = true;
  const std::string where =
      "http://" + options_.metrics_host + ":" + std::to_string(st.metrics_server->port());
  st.console.note("live metrics: " + where + "/ (dashboard), " + where + "/metrics (Prometheus)");
  const Exposure exposure = exposureOf(options_.metrics_host);
  if (exposure != Exposure::kThisMachine) {
    st.console.metricsExposed(options_.metrics_host, st.metrics_server->port(),
                              exposure == Exposure::kEveryAddress);
  }
}

}  // namespace cumulus::launch
