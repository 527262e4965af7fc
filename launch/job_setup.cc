#include "launch/job_setup.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "base/bind_address.h"
#include "base/env_names.h"
#include "comm/error.h"
#include "launch/tcp_probe.h"

namespace cumulus::launch {
namespace {

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

std::string nodeCountText(const LaunchOptions& o) {
  return o.min_nodes == o.max_nodes
             ? std::to_string(o.max_nodes)
             : std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes);
}

std::string jobToken(bool multi) {
  const char* env_token = std::getenv(base::env::kJobToken);
  if (env_token && *env_token) return env_token;
  if (!multi) return randomHex(16);
  throw JobSetupError(
      "a job on several nodes needs the same secret on every node: export "
      "CUMULUS_JOB_TOKEN=<secret> before cumulus-run on each of them");
}

// Node 0 hosts the Store; every node, node 0 included, talks to it through a client.
void connectStore(Job& job, const LaunchOptions& o, bool (*interrupted)()) {
  // An explicit endpoint names the address to bind; otherwise loopback.
  job.store_host = o.rdzv_host;
  job.store_port = o.rdzv_port;
  if (job.host) {
    try {
      job.server = std::make_unique<comm::StoreServer>(job.store_host, job.store_port, job.token);
    } catch (const std::exception& e) {
      throw JobSetupError("cannot host the rendezvous Store on " + job.store_host + ":" +
                          std::to_string(job.store_port) + ": " + e.what() +
                          " (is another job using that port? choose another with --rdzv-endpoint)");
    }
    job.store_port = job.server->port();
  } else {
    // The StoreClient would also retry, but gRPC's reconnect backoff after a refused connection
    // adds seconds to every node that starts before node 0.
    waitUntilListening(job.store_host, job.store_port, toMs(o.rdzv_timeout), interrupted);
  }
  // An IPv6 address in brackets, as parseHostPort (CUMULUS_STORE) reads it back.
  const bool ipv6 = job.store_host.find(':') != std::string::npos;
  job.store_endpoint =
      (ipv6 ? "[" + job.store_host + "]" : job.store_host) + ":" + std::to_string(job.store_port);
  comm::StoreClientOptions copts;
  copts.connect_timeout = toMs(o.rdzv_timeout);
  job.store = std::make_unique<comm::StoreClient>(job.store_host, job.store_port, job.token, copts);
  job.group_store = std::make_unique<GroupStore>(*job.store);
}

}  // namespace

std::unique_ptr<Job> setUpJob(LaunchOptions& o, AgentConsole& console, bool (*interrupted)()) {
  auto job = std::make_unique<Job>();
  job->multi = o.max_nodes > 1;
  job->host = o.node_rank == RendezvousRound::kHostId;
  if (o.run_id.empty()) o.run_id = "run-" + randomHex(4);
  job->run_dir = o.log_dir + "/" + o.run_id;
  job->errors = std::make_unique<ErrorLog>(job->run_dir + "/errors.jsonl", o.run_id);
  std::error_code ec;
  std::filesystem::create_directories(job->run_dir, ec);
  if (ec) throw JobSetupError("cannot create log directory " + job->run_dir + ": " + ec.message());
  job->token = jobToken(job->multi);
  connectStore(*job, o, interrupted);
  // The data plane listens where peers on other hosts can reach it: the address this host uses
  // towards the Store, unless named.
  if (!o.bind_host.empty()) {
    job->bind_host = o.bind_host;
  } else {
    try {
      job->bind_host = base::routeSourceAddress(job->store_host);
    } catch (const std::exception& e) {
      throw JobSetupError(e.what());
    }
  }
  console.started(o.run_id, nodeCountText(o), o.nproc_per_node, job->store_endpoint, job->bind_host,
                  job->run_dir);

  if (!o.preemption_notice.empty()) {
    NoticeSourceOptions notice_options;
    notice_options.warn = [&console](const std::string& line) { console.noticeWarning(line); };
    job->notice = makeNoticeSource(o.preemption_notice, notice_options);
    console.pollingNotices(job->notice->describe());
  }

  RendezvousOptions ropts;
  ropts.min_nodes = o.min_nodes;
  ropts.max_nodes = o.max_nodes;
  ropts.last_call = toMs(o.rdzv_last_call);
  ropts.timeout = toMs(o.rdzv_timeout);
  ropts.join_running = o.recovery == Recovery::kInPlace;
  job->rdzv = std::make_unique<RendezvousRound>(
      *job->store, ropts, RoundNode{o.node_rank, o.nproc_per_node, randomHex(8)}, interrupted,
      [&console](const std::string& line) { console.note(line); });
  return job;
}

void prepareParameterServer(Job& job, AgentConsole& console, int64_t generation, int64_t world_size,
                            std::chrono::milliseconds timeout) {
  if (!job.host) {
    job.ps_endpoint = job.group_store->parameterServer(generation, timeout);
    return;
  }
  if (!job.parameter_server || job.parameter_server->world() != world_size) {
    job.parameter_server.reset();
    try {
      job.parameter_server = std::make_unique<comm::ParameterServer>(job.store_host, 0, job.token,
                                                                     static_cast<int>(world_size));
    } catch (const std::exception& e) {
      throw JobSetupError("cannot host the parameter server on " + job.store_host + ": " +
                          e.what());
    }
    job.ps_endpoint = job.store_host + ":" + std::to_string(job.parameter_server->port());
    console.parameterServer(job.ps_endpoint);
  }
  job.group_store->publishParameterServer(generation, job.ps_endpoint);
}

int prepareMasterPort(Job& job, int64_t generation, std::chrono::milliseconds timeout) {
  if (!job.host) return job.group_store->masterPort(generation, timeout);
  int port = 0;
  try {
    port = base::pickFreePort();
  } catch (const std::exception& e) {
    throw JobSetupError(std::string("cannot pick MASTER_PORT for the workers: ") + e.what());
  }
  if (job.multi) job.group_store->publishMasterPort(generation, port);
  return port;
}

void endWaiting(Job& job, AgentConsole& console, int64_t generation, int exit_code,
                const std::string& what) {
  if (!job.host || !job.multi) return;
  try {
    job.rdzv->end(generation, exit_code,
                  "the job ended (" + what + ", exit code " + std::to_string(exit_code) +
                      ") before this node could join",
                  std::chrono::milliseconds(5000));
  } catch (const cumulus::CommError& e) {
    // Best effort: the job is over whatever the nodes waiting for the next round learn.
    console.endWaitingFailed(generation, e.what());
  }
}

}  // namespace cumulus::launch
