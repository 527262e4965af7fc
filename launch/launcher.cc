#include "launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/error.h"
#include "comm/parameter_server.h"
#include "comm/store_client.h"
#include "comm/store_server.h"
#include "launch/bind_address.h"
#include "launch/error_log.h"
#include "launch/output_mux.h"
#include "launch/preemption_notice.h"
#include "launch/rendezvous_round.h"
#include "launch/tcp_probe.h"
#include "launch/worker_group.h"
#include "launch/worker_process.h"

namespace cumulus::launch {
namespace {

// The one piece of process-wide state: a signal handler can reach nothing else.
std::atomic<int> g_stop_signal{0};

// A set-up problem the user must fix (exit code 2).
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string randomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, buf.data(), bytes) != static_cast<ssize_t>(bytes)) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot read /dev/urandom");
  }
  ::close(fd);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : buf) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::chrono::milliseconds toMs(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

struct Launcher::State {
  std::unique_ptr<comm::StoreServer> server;  // node 0 only
  std::unique_ptr<comm::StoreClient> store;
  std::unique_ptr<comm::ParameterServer> parameter_server;
  std::unique_ptr<NoticeSource> notice;
  std::unique_ptr<Rendezvous> rdzv;
  std::string ps_endpoint;  // host:port when comm.algorithm is funnel
  std::string token;
  std::string run_dir;
  std::unique_ptr<ErrorLog> errors;  // <run_dir>/errors.jsonl
  std::string store_host;
  int store_port = 0;
  std::string store_endpoint;  // host:port
  std::string bind_host;       // this node's data-plane address (CUMULUS_BIND_HOST)
  bool multi = false;          // a job of more than one node (--nnodes MAX > 1)
  bool host = false;           // this node hosts the Store (node 0)
  int64_t generation = 0;      // of the current (or last) group
};

// This node's workers of one generation.
struct Launcher::Group {
  explicit Group(FILE* console) : mux(console) {}
  Round round;
  std::string gen;                // the generation, as text
  std::vector<int64_t> node_ids;  // of the group, ascending
  OutputMux mux;
  std::vector<Worker> workers;
};

// How supervise() saw a group end.
struct Launcher::GroupEnd {
  enum class Kind {
    kExit,           // finished, preempted or stopped by a signal: report.exit_code is set
    kWorkerFailed,   // `failed` exited non-zero or by a signal
    kRemoteFailure,  // another node's worker failed; `detail` says which
    kStoreLost,      // node 0's Store did not answer; `detail` is the error
    kRegroup,        // node 0 re-forms the group to admit waiting nodes; `detail` says which
  };
  Kind kind = Kind::kExit;
  const Worker* failed = nullptr;
  std::string detail;
};

Launcher::Launcher(LaunchOptions options, FILE* console)
    : options_(std::move(options)), console_(console), state_(std::make_unique<State>()) {
  // Line by line even into a file or a pipe, so what the agent says shows up as it happens.
  std::setvbuf(console_, nullptr, _IOLBF, 0);
}

Launcher::~Launcher() = default;

void Launcher::requestStop(int sig) { g_stop_signal.store(sig); }

LaunchReport Launcher::run() {
  try {
    return runOrThrow();
  } catch (const SetupError& e) {
    std::fprintf(console_, "cumulus-run: error: %s\n", e.what());
  } catch (const comm::CommError& e) {
    std::fprintf(console_, "cumulus-run: error: rendezvous failed: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(console_, "cumulus-run: error: %s\n", e.what());
  }
  LaunchReport report;
  report.exit_code = 2;
  return report;
}

namespace {

std::vector<int64_t> idsOf(const Round& round) {
  std::vector<int64_t> ids;
  for (const RoundNode& n : round.nodes) ids.push_back(n.node_id);
  return ids;
}

std::string nodeCountText(const LaunchOptions& o) {
  return o.min_nodes == o.max_nodes
             ? std::to_string(o.max_nodes)
             : std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes);
}

}  // namespace

void Launcher::setUp() {
  LaunchOptions& o = options_;
  State& st = *state_;
  st.multi = o.max_nodes > 1;
  st.host = o.node_rank == Rendezvous::kHostId;
  if (o.run_id.empty()) o.run_id = "run-" + randomHex(4);
  st.run_dir = o.log_dir + "/" + o.run_id;
  st.errors = std::make_unique<ErrorLog>(st.run_dir + "/errors.jsonl", o.run_id);
  std::error_code ec;
  std::filesystem::create_directories(st.run_dir, ec);
  if (ec) throw SetupError("cannot create log directory " + st.run_dir + ": " + ec.message());

  const char* env_token = std::getenv("CUMULUS_JOB_TOKEN");
  if (env_token && *env_token) {
    st.token = env_token;
  } else if (!st.multi) {
    st.token = randomHex(16);
  } else {
    throw SetupError(
        "a job on several nodes needs the same secret on every node: export "
        "CUMULUS_JOB_TOKEN=<secret> before cumulus-run on each of them");
  }

  // Node 0 hosts the Store. An explicit endpoint names the address to bind; otherwise loopback.
  st.store_host = o.rdzv_host;
  st.store_port = o.rdzv_port;
  if (st.host) {
    try {
      st.server = std::make_unique<comm::StoreServer>(st.store_host, st.store_port, st.token);
    } catch (const std::exception& e) {
      throw SetupError("cannot host the rendezvous Store on " + st.store_host + ":" +
                       std::to_string(st.store_port) + ": " + e.what() +
                       " (is another job using that port? choose another with --rdzv-endpoint)");
    }
    st.store_port = st.server->port();
  } else {
    // The StoreClient would also retry, but gRPC's reconnect backoff after a refused connection
    // adds seconds to every node that starts before node 0.
    waitUntilListening(st.store_host, st.store_port, toMs(o.rdzv_timeout),
                       [] { return g_stop_signal.load() != 0; });
  }
  st.store_endpoint = st.store_host + ":" + std::to_string(st.store_port);
  comm::StoreClientOptions copts;
  copts.connect_timeout = toMs(o.rdzv_timeout);
  st.store = std::make_unique<comm::StoreClient>(st.store_host, st.store_port, st.token, copts);
  // The data plane listens where peers on other hosts can reach it: the address this host uses
  // towards the Store, unless named.
  if (!o.bind_host.empty()) {
    st.bind_host = o.bind_host;
  } else {
    try {
      st.bind_host = routeSourceAddress(st.store_host);
    } catch (const std::exception& e) {
      throw SetupError(e.what());
    }
  }
  std::fprintf(console_,
               "cumulus-run: run %s, %s node(s) x %lld worker(s), store %s, data plane on %s, "
               "logs %s\n",
               o.run_id.c_str(), nodeCountText(o).c_str(), static_cast<long long>(o.nproc_per_node),
               st.store_endpoint.c_str(), st.bind_host.c_str(), st.run_dir.c_str());

  if (!o.preemption_notice.empty()) {
    NoticeSourceOptions notice_options;
    notice_options.warn = [console = console_](const std::string& line) {
      std::fprintf(console, "%s\n", line.c_str());
    };
    st.notice = makeNoticeSource(o.preemption_notice, notice_options);
    std::fprintf(console_, "cumulus-run: polling %s for preemption notices\n",
                 st.notice->describe().c_str());
  }

  RendezvousOptions ropts;
  ropts.min_nodes = o.min_nodes;
  ropts.max_nodes = o.max_nodes;
  ropts.last_call = toMs(o.rdzv_last_call);
  ropts.timeout = toMs(o.rdzv_timeout);
  st.rdzv = std::make_unique<Rendezvous>(
      *st.store, ropts, RoundNode{o.node_rank, o.nproc_per_node, randomHex(8)},
      [] { return g_stop_signal.load() != 0; },
      [this](const std::string& line) {
        std::fprintf(console_, "cumulus-run: %s\n", line.c_str());
      });
}

void Launcher::endWaiting(int64_t generation, int exit_code, const std::string& what) {
  State& st = *state_;
  if (!st.host || !st.multi) return;
  try {
    st.rdzv->end(generation, exit_code,
                 "the job ended (" + what + ", exit code " + std::to_string(exit_code) +
                     ") before this node could join",
                 std::chrono::milliseconds(5000));
  } catch (const comm::CommError& e) {
    // Best effort: the job is over whatever the nodes waiting for the next round learn.
    std::fprintf(console_,
                 "cumulus-run: could not tell the nodes waiting for generation %lld that the job "
                 "ended: %s\n",
                 static_cast<long long>(generation), e.what());
  }
}

int Launcher::giveUpWithoutStore(const std::string& error) {
  // Like torchrun's c10d store host: the rendezvous lives on node 0 and dies with it.
  std::fprintf(console_,
               "cumulus-run: giving up: the rendezvous Store on node 0 (%s) is unreachable: %s; "
               "node 0 hosts the Store, so the job cannot go on without it: launch it again on "
               "every node to resume from the newest checkpoint\n",
               state_->store_endpoint.c_str(), error.c_str());
  return 1;
}

LaunchReport Launcher::runOrThrow() {
  setUp();
  const LaunchOptions& o = options_;
  State& st = *state_;
  LaunchReport report;
  std::vector<int64_t> previous_group;
  for (int64_t next = 0;; next = st.generation + 1) {
    Round round;
    try {
      round = st.rdzv->join(next, report.restarts);
    } catch (const comm::CommError& e) {
      if (next == 0) throw;  // never reached the Store: a set-up error ("rendezvous failed")
      report.exit_code = giveUpWithoutStore(e.what());
      return report;
    }
    if (round.outcome == Round::Outcome::kInterrupted) {
      const int sig = g_stop_signal.load();
      if (sig == SIGTERM) {  // a preemption notice with no worker running: nothing to save
        std::fprintf(console_,
                     "cumulus-run: preemption notice (SIGTERM) during the rendezvous of "
                     "generation %lld; no worker was running; launch the same command again to "
                     "resume\n",
                     static_cast<long long>(round.generation));
        report.preemptions++;
        report.exit_code = kExitPreempted;
      } else {
        std::fprintf(console_, "cumulus-run: received %s during the rendezvous\n",
                     signalName(sig).c_str());
        report.exit_code = 128 + sig;
      }
      endWaiting(round.generation, report.exit_code,
                 "node 0's launcher was stopped by " + signalName(sig));
      return report;
    }
    if (round.outcome == Round::Outcome::kEnded) {
      const char* what = round.exit_code == 0                ? "done"
                         : round.exit_code == kExitPreempted ? "preempted"
                                                             : "giving up";
      std::fprintf(console_, "cumulus-run: %s: %s\n", what, round.reason.c_str());
      report.exit_code = round.exit_code;
      return report;
    }
    st.generation = round.generation;
    report.restarts = static_cast<int>(round.restarts);
    std::unique_ptr<Group> group = startGroup(round, report.restarts);
    if (!previous_group.empty() && previous_group != group->node_ids) {
      st.errors->regroup(st.generation, previous_group, group->node_ids, round.worldSize());
    }
    previous_group = group->node_ids;

    const GroupEnd end = supervise(*group, report);
    if (end.kind == GroupEnd::Kind::kExit) return report;
    if (end.kind == GroupEnd::Kind::kRegroup) {
      // SIGTERM is the workers' preemption notice: they agree on a step, checkpoint it and exit
      // 75, so admitting a node costs a restart of the processes but no training progress.
      std::fprintf(console_,
                   "cumulus-run: %s: the workers checkpoint and stop (as for a preemption, within "
                   "--preemption-grace %.1f s), then the group forms again; not counted as a "
                   "restart\n",
                   end.detail.c_str(), o.preemption_grace);
      try {
        st.rdzv->announceRejoin(st.generation + 1);
      } catch (const comm::CommError& e) {
        // Without the announcement node 0 closes the next round after the last call, maybe
        // without this node; the group still forms, so go on.
        std::fprintf(console_,
                     "cumulus-run: could not announce this node for generation %lld: %s\n",
                     static_cast<long long>(st.generation + 1), e.what());
      }
      stopWorkers(group->workers, group->mux, o.preemption_grace);
      continue;
    }
    if (!restartAfter(*group, end, report)) return report;
  }
}

// The funnel's parameter server lives beside the Store, on node 0; it serves one world size, so a
// group of another size gets a new one. The other nodes read its address per generation.
void Launcher::hostParameterServer(int64_t world_size, const std::string& gen) {
  State& st = *state_;
  if (!st.host) {
    st.ps_endpoint = st.store->get("launch/" + gen + "/ps_endpoint", toMs(options_.rdzv_timeout));
    return;
  }
  if (!st.parameter_server || st.parameter_server->world() != world_size) {
    st.parameter_server.reset();
    try {
      st.parameter_server = std::make_unique<comm::ParameterServer>(st.store_host, 0, st.token,
                                                                    static_cast<int>(world_size));
    } catch (const std::exception& e) {
      throw SetupError("cannot host the parameter server on " + st.store_host + ": " + e.what());
    }
    st.ps_endpoint = st.store_host + ":" + std::to_string(st.parameter_server->port());
    std::fprintf(console_, "cumulus-run: parameter server (funnel) on %s\n",
                 st.ps_endpoint.c_str());
  }
  st.store->set("launch/" + gen + "/ps_endpoint", st.ps_endpoint);
}

std::unique_ptr<Launcher::Group> Launcher::startGroup(const Round& round, int restarts) {
  const LaunchOptions& o = options_;
  State& st = *state_;
  auto group = std::make_unique<Group>(console_);
  group->round = round;
  group->gen = std::to_string(round.generation);
  group->node_ids = idsOf(round);
  const int64_t world_size = round.worldSize();
  const int64_t node_rank = round.nodeRankOf(o.node_rank);
  const int64_t first_rank = round.firstRankOf(o.node_rank);
  if (st.multi) {
    std::fprintf(console_,
                 "cumulus-run: generation %s: nodes %s, world size %lld; this node is node rank "
                 "%lld (ranks %lld-%lld)\n",
                 group->gen.c_str(), round.nodeIds().c_str(), static_cast<long long>(world_size),
                 static_cast<long long>(node_rank), static_cast<long long>(first_rank),
                 static_cast<long long>(first_rank + o.nproc_per_node - 1));
  }
  if (o.host_parameter_server) hostParameterServer(world_size, group->gen);

  const std::string gen_dir = st.run_dir + "/gen" + group->gen;
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
        {"MASTER_ADDR", st.store_host},
        {"MASTER_PORT", std::to_string(st.store_port)},
        {"CUMULUS_RUN_ID", o.run_id},
        {"CUMULUS_RESTART_COUNT", std::to_string(restarts)},
        {"CUMULUS_GENERATION", group->gen},
        {"CUMULUS_JOB_TOKEN", st.token},
        {"CUMULUS_LOG_DIR", gen_dir},
        {"CUMULUS_BIND_HOST", st.bind_host},
        {"CUMULUS_PREEMPTION_GRACE", std::to_string(worker_grace)},
    };
    if (!st.ps_endpoint.empty()) env.emplace_back("CUMULUS_PS_ENDPOINT", st.ps_endpoint);
    w.process = std::make_unique<WorkerProcess>(o.command, env);
    w.process->start();
    group->mux.add(w.rank, w.process->outputFd(), w.log_path);
    group->workers.push_back(std::move(w));
  }
  return group;
}

// Watches the group until it finishes, one worker fails, another node reports a failure, node 0
// re-forms the group, or the launcher is told to stop.
Launcher::GroupEnd Launcher::supervise(Group& group, LaunchReport& report) {
  const LaunchOptions& o = options_;
  State& st = *state_;
  std::vector<Worker>& workers = group.workers;
  OutputMux& mux = group.mux;
  const std::string& gen = group.gen;
  const int interval_ms = std::max(1, static_cast<int>(o.monitor_interval * 1000));
  GroupEnd end;
  auto next_store_check = std::chrono::steady_clock::now();
  auto next_notice_poll = std::chrono::steady_clock::now();
  for (;;) {
    mux.pump(interval_ms);
    int sig = g_stop_signal.load();
    std::string notice_detail;
    if (!sig && st.notice && std::chrono::steady_clock::now() >= next_notice_poll) {
      next_notice_poll =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(interval_ms, 500));
      const NoticeEvent event = st.notice->poll();
      notice_detail = event.detail;
      if (event.kind == NoticeKind::kPreemption) sig = SIGTERM;
      if (event.kind == NoticeKind::kRebalance) {
        // A softer, earlier signal: the workers agree on a step, checkpoint it and go on
        // (trainer/preemption.h). SIGUSR1 stays blocked in a worker that does not ask for it.
        std::fprintf(console_,
                     "cumulus-run: %s; asking the workers to checkpoint now and keep training\n",
                     event.detail.c_str());
        for (auto& w : workers) {
          if (!w.process->poll().exited) w.process->signal(SIGUSR1);
        }
      }
    }
    if (sig == SIGTERM) {
      // A spot notice: the workers agree on a stop step, checkpoint there and exit 75.
      std::fprintf(console_,
                   "cumulus-run: preemption notice (%s); asking the workers to "
                   "checkpoint and stop within %.1f s\n",
                   notice_detail.empty() ? "SIGTERM" : notice_detail.c_str(), o.preemption_grace);
      auto t0 = std::chrono::steady_clock::now();
      stopWorkers(workers, mux, o.preemption_grace);
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      report.exit_code = reportPreemption(workers, mux, console_, took, o.preemption_grace);
      if (report.exit_code == kExitPreempted) report.preemptions++;
      endWaiting(st.generation + 1, report.exit_code, "preempted");
      return end;
    }
    if (sig) {
      std::fprintf(console_, "cumulus-run: received %s, stopping workers\n",
                   signalName(sig).c_str());
      stopWorkers(workers, mux, o.stop_grace);
      report.exit_code = 128 + sig;
      endWaiting(st.generation + 1, report.exit_code,
                 "node 0's launcher was stopped by " + signalName(sig));
      return end;
    }
    bool all_done = true;
    bool any_preempted = false;
    for (auto& w : workers) {
      const ExitStatus& s = w.process->poll();
      if (!s.exited) {
        all_done = false;
      } else if (s.exit_code == kExitPreempted && s.signal == 0) {
        any_preempted = true;
      } else if (!s.ok() && !end.failed) {
        end.failed = &w;
      }
    }
    if (end.failed) {
      end.kind = GroupEnd::Kind::kWorkerFailed;
      return end;
    }
    if (all_done) {
      // Workers that stopped at an agreed step because node 0 re-forms the group (its workers got
      // SIGTERM and told ours) are not a preemption of the job.
      if (any_preempted && st.multi) {
        try {
          if (auto r = st.store->tryGet("launch/" + gen + "/regroup")) {
            end.kind = GroupEnd::Kind::kRegroup;
            end.detail = *r;
            return end;
          }
        } catch (const comm::CommError& e) {
          // Without the Store there is no regroup to join: the stop is the job's preemption.
          std::fprintf(console_,
                       "cumulus-run: could not read whether node 0 re-forms the group (%s); "
                       "treating the stop as a preemption\n",
                       e.what());
        }
      }
      for (auto& w : workers) mux.finish(w.rank);
      if (any_preempted) {
        // A worker got the notice itself (SIGTERM from the cloud) and the group agreed to stop.
        report.preemptions++;
        report.exit_code = reportPreemption(workers, mux, console_, 0.0, o.preemption_grace);
      } else {
        std::fprintf(console_, "cumulus-run: all %lld worker(s) finished\n",
                     static_cast<long long>(o.nproc_per_node));
      }
      if (st.multi) {
        st.store->set("launch/" + gen + "/done/" + std::to_string(o.node_rank), "1");
        if (st.host) {  // keep the Store up until every node is done with it
          std::vector<std::string> done;
          for (int64_t id : group.node_ids) {
            done.push_back("launch/" + gen + "/done/" + std::to_string(id));
          }
          try {
            st.store->wait(done, toMs(o.rdzv_timeout));
          } catch (const comm::CommError& e) {
            // Best effort: this node is done; a node that never says so is gone.
            std::fprintf(console_,
                         "cumulus-run: not every node reported it finished generation %s: %s\n",
                         gen.c_str(), e.what());
          }
        }
      }
      endWaiting(st.generation + 1, report.exit_code,
                 report.exit_code == 0 ? "finished" : "preempted");
      return end;
    }
    if (st.multi && std::chrono::steady_clock::now() >= next_store_check) {
      next_store_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      // Node 0 gone (its agent gave up, or the host was lost) takes the Store with it: that is
      // a failure of the group too, not a reason for this agent to die with a Store error.
      try {
        if (auto f = st.store->tryGet("launch/" + gen + "/failed")) {
          end.kind = GroupEnd::Kind::kRemoteFailure;
          end.detail = *f;
          return end;
        }
        // Nodes that arrived after this group formed wait in the next round: the host re-forms
        // the group to admit them (torchrun's num_nodes_waiting). Not for an id already in the
        // group (a returning host whose loss is not noticed yet, or a duplicate --node-rank):
        // the next restart sorts that out without stopping a healthy group.
        if (st.host && static_cast<int64_t>(group.node_ids.size()) < o.max_nodes) {
          std::vector<int64_t> waiting;
          for (int64_t id : st.rdzv->waiting(st.generation + 1)) {
            if (!std::binary_search(group.node_ids.begin(), group.node_ids.end(), id)) {
              waiting.push_back(id);
            }
          }
          if (!waiting.empty()) {
            st.store->compareSet("launch/" + gen + "/regroup", "",
                                 "node(s) " + joinIds(waiting) + " waiting to join");
          }
        }
        if (auto r = st.store->tryGet("launch/" + gen + "/regroup")) {
          end.kind = GroupEnd::Kind::kRegroup;
          end.detail = *r;
          return end;
        }
      } catch (const comm::CommError& e) {
        end.kind = GroupEnd::Kind::kStoreLost;
        end.detail = e.what();
        return end;
      }
    }
  }
}

// One failure stops the whole group (on every node) and restarts it under a new generation, if
// restarts are left and node 0's Store is there. Returns false, with report.exit_code set, when
// the job gives up.
bool Launcher::restartAfter(Group& group, const GroupEnd& end, LaunchReport& report) {
  const LaunchOptions& o = options_;
  State& st = *state_;
  const std::string& gen = group.gen;
  bool store_lost = end.kind == GroupEnd::Kind::kStoreLost;
  std::string store_error = store_lost ? end.detail : "";
  std::string what;
  // Exit code 2 is a worker's usage or configuration error (a bad flag, a config that does not
  // parse, a checkpoint that does not fit the experiment): a restart would only repeat it.
  bool repeatable = false;
  if (end.kind == GroupEnd::Kind::kWorkerFailed) {
    const Worker& failed = *end.failed;
    const ExitStatus s = failed.process->poll();
    repeatable = s.signal == 0 && s.exit_code == kExitUsage;
    report.failed_rank = failed.rank;
    report.failure = s.describe();
    what = "rank " + std::to_string(failed.rank) + " failed (" + s.describe() + ")";
    st.errors->workerFailed(st.generation, failed.rank, failed.local_rank, o.node_rank,
                            failed.process->pid(), s, failed.log_path);
    if (st.multi) {
      try {
        st.store->compareSet("launch/" + gen + "/failed", "", what);
      } catch (const comm::CommError& e) {
        store_lost = true;
        store_error = e.what();
      }
    }
  } else if (store_lost) {
    what = "the rendezvous Store is unreachable (" + store_error + ")";
  } else {
    what = end.detail + " on another node";
  }
  std::fprintf(console_, "cumulus-run: %s; stopping the group\n", what.c_str());
  // A node loss counts like a crash: each is one restart of the group.
  const bool giving_up = repeatable || report.restarts >= o.max_restarts;
  if (st.multi && !store_lost && !giving_up) {
    // Before stopping (up to --stop-grace): the host waits for this node beyond the last call.
    try {
      st.rdzv->announceRejoin(st.generation + 1);
    } catch (const comm::CommError& e) {
      store_lost = true;
      store_error = e.what();
    }
  }
  stopWorkers(group.workers, group.mux, o.stop_grace);
  if (st.multi && !store_lost) {
    // Node 0 keeps the Store up until every agent has seen the failure, so none of them dies of
    // a vanished Store instead of reporting it. A lost node never answers: wait a bounded time.
    try {
      st.store->set("launch/" + gen + "/stopped/" + std::to_string(o.node_rank), "1");
      if (st.host && giving_up) {
        std::vector<std::string> stopped;
        for (int64_t id : group.node_ids) {
          stopped.push_back("launch/" + gen + "/stopped/" + std::to_string(id));
        }
        st.store->wait(stopped, toMs(std::min(o.rdzv_timeout, o.stop_grace + 5.0)));
      }
    } catch (const comm::CommError& e) {
      // Best effort: the failure is reported below whether or not the others saw it.
      std::fprintf(console_,
                   "cumulus-run: not every node confirmed it saw the failure of generation %s: "
                   "%s\n",
                   gen.c_str(), e.what());
    }
  }
  if (store_lost) {
    report.exit_code = giveUpWithoutStore(store_error);
    return false;
  }
  if (giving_up) {
    const char* log = end.failed ? end.failed->log_path.c_str() : st.errors->path().c_str();
    if (repeatable) {
      std::fprintf(console_,
                   "cumulus-run: giving up: %s, an error in the command or the experiment that a "
                   "restart would repeat; fix it and launch again (see %s)\n",
                   what.c_str(), log);
    } else {
      std::fprintf(console_,
                   "cumulus-run: giving up: %s and no restarts are left (--max-restarts %lld); "
                   "see %s\n",
                   what.c_str(), static_cast<long long>(o.max_restarts), log);
    }
    report.exit_code = repeatable ? kExitUsage : 1;
    endWaiting(st.generation + 1, 1, "gave up after " + what);
    return false;
  }
  report.restarts++;
  std::fprintf(console_, "cumulus-run: restarting the group (restart %d of %lld)\n",
               report.restarts, static_cast<long long>(o.max_restarts));
  return true;
}

}  // namespace cumulus::launch
