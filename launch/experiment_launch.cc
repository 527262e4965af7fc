#include "launch/experiment_launch.h"

#include "configs/parse.h"

namespace cumulus::launch {
namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string experimentPathOf(const std::vector<std::string>& command) {
  for (size_t i = 1; i < command.size(); ++i) {
    if (command[i] == "--set") {
      ++i;
      continue;
    }
    if (endsWith(command[i], ".yaml") || endsWith(command[i], ".yml")) return command[i];
  }
  return "";
}

void applyExperimentLaunchSection(LaunchOptions& o) {
  std::string path = experimentPathOf(o.command);
  if (path.empty()) {
    checkNodeRank(o);
    checkMinWorkers(o);
    return;
  }
  std::vector<std::string> overrides;
  for (size_t i = 1; i < o.command.size(); ++i) {
    const std::string& arg = o.command[i];
    if (arg == "--set" && i + 1 < o.command.size()) {
      overrides.push_back(o.command[++i]);
    } else if (arg.rfind("--set=", 0) == 0) {
      overrides.push_back(arg.substr(6));
    }
  }
  configs::Experiment e;
  try {
    e = configs::loadExperiment(path, overrides);
  } catch (const configs::ConfigError& err) {
    throw UsageError(err.what());
  }
  o.experiment_path = path;
  const configs::LaunchConfig& l = e.launch;
  auto given = [&](const char* flag) { return o.explicit_flags.count(flag) > 0; };
  if (!given("nproc-per-node")) o.nproc_per_node = l.nproc_per_node;
  if (!given("nnodes")) {
    std::tie(o.min_nodes, o.max_nodes) = parseNodeRange(l.nnodes, "nnodes");
  } else if (o.allocation_nodes > 0) {
    // Under Slurm the allocation is MAX; an elastic range in the experiment still says how few
    // nodes the job may go on with.
    const auto [lo, hi] = parseNodeRange(l.nnodes, "nnodes");
    if (lo < hi) o.min_nodes = std::min(lo, o.allocation_nodes);
  }
  if (!given("max-restarts")) o.max_restarts = l.max_restarts;
  if (!given("monitor-interval")) o.monitor_interval = l.monitor_interval;
  if (!given("rdzv-timeout")) o.rdzv_timeout = l.rdzv_timeout;
  if (!given("rdzv-last-call")) o.rdzv_last_call = l.rdzv_last_call;
  if (!given("metrics-port")) o.metrics_port = static_cast<int>(l.metrics_port);
  const bool min_workers_from_file = !given("min-workers") && l.min_workers > 0;
  if (min_workers_from_file) o.min_workers = l.min_workers;
  if (!given("recovery")) o.recovery = parseRecovery(l.recovery, "launch.recovery in " + path);
  if (!given("rdzv-endpoint") && !given("standalone") && !l.rdzv_endpoint.empty()) {
    std::tie(o.rdzv_host, o.rdzv_port) = parseEndpoint(l.rdzv_endpoint, "rdzv-endpoint");
    o.explicit_flags.insert("rdzv-endpoint");
  }
  o.host_parameter_server = given("parameter-server") || e.comm.algorithm == Algorithm::kFunnel;
  if (o.node_rank >= o.max_nodes) {
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is out of range for " +
                     std::to_string(o.max_nodes) + " node(s) (launch.nnodes in " + path + ")");
  }
  if (o.max_nodes > 1 && !given("rdzv-endpoint")) {
    throw UsageError("launch.nnodes \"" + l.nnodes + "\" in " + path +
                     " needs node 0's address: --rdzv-endpoint HOST:PORT or launch.rdzv_endpoint");
  }
  checkMinWorkers(o, min_workers_from_file ? "launch.min_workers" : "--min-workers",
                  min_workers_from_file ? " in " + path : "");
}

}  // namespace cumulus::launch
