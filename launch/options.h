#pragma once
// cumulus-run's command line, torchrun-style:
//
//   cumulus-run [flags] -- PROGRAM [ARGS...]
//
// Flags (both --flag=value and --flag value are accepted; '_' and '-' are interchangeable; parsed
// with CLI11 through base/command_line.h, so --help and the errors look as in every binary):
//   --nproc-per-node N      workers on this node (default 1, or launch.nproc_per_node)
//   --nnodes N | MIN:MAX    nodes in the job (default 1); MIN:MAX is elastic (rendezvous_round.h)
//   --min-workers N         in place: the fewest workers the group trains on with; a notice to
//                           some workers makes them leave while N remain (default: MIN × nproc)
//   --node-rank I           this node's id, 0 … MAX-1, unique (default 0); node 0 hosts the Store
//   --rdzv-endpoint H:P     the Store on node 0 (node 0 hosts it there; others connect)
//   --standalone            single node, Store on a free loopback port
//   --max-restarts K        group restarts after a crash or a node loss before giving up
//                           (default 3)
//   --monitor-interval S    seconds between health checks of the workers (default 0.1)
//   --run-id ID             names the job (default: random); logs go under --log-dir/ID
//   --log-dir DIR           where per-rank logs and the error file go (default runs/logs)
//   --stop-grace S          SIGTERM → SIGKILL delay when stopping workers (default 10)
//   --rdzv-timeout S        how long to wait for the Store and for the other nodes (default 60)
//   --rdzv-last-call S      elastic: close a round with >= MIN nodes after S s with no new joiner
//                           (default 3)
//   --preemption-notice SRC aws, gcp, azure, auto, file:PATH or url:http://… polled for a spot
//                           notice (preemption_notice.h)
//   --preemption-grace S    notice → every worker gone, checkpoint included (default
//                           kDefaultPreemptionGraceSeconds, 25, for GCP's 30)
//   --bind-host H           this node's data-plane address (CUMULUS_BIND_HOST for the workers);
//                           default: the source address of the route to the rendezvous host
//   --recovery MODE         restart (stop the group, restart it from the newest checkpoint) or
//                           in_place (the survivors go on; a dead worker is replaced by a joiner);
//                           default in_place (kDefaultRecovery), or launch.recovery
//   --metrics-port P        node 0 serves the job's Prometheus /metrics, its live dashboard (/)
//                           and their JSON (/api/status, /api/records) on port P (default 0:
//                           off, or launch.metrics_port); other nodes ignore it, saying so
//   --metrics-host H        the address it binds (default 127.0.0.1; 0.0.0.0 for every one)
//   --parameter-server      node 0 hosts the funnel's parameter server even without a YAML saying
//                           comm.algorithm: funnel (for workers such as cumulus-allreduce-probe)
//
// Flags given on the command line win over an experiment's `launch:` section (see launcher.h).

#include <cstdint>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "configs/experiment.h"

namespace cumulus::launch {

// A mistake on the command line or in the launch: section; the message says which flag and what
// to do.
using base::UsageError;

// "in_place" or "restart" → the mode; throws UsageError naming `what` ("--recovery",
// "launch.recovery").
// (cumulus::Recovery, <cumulus/options.h>: restart stops every worker of every node and restarts
// the group under a new generation; in_place lets the survivors re-form while the agent replaces
// the dead worker.)
Recovery parseRecovery(const std::string& text, const std::string& what);

struct LaunchOptions {
  int64_t nproc_per_node = 1;
  int64_t min_nodes = 1;
  int64_t max_nodes = 1;
  int64_t min_workers = 0;  // --min-workers; 0: every worker of MIN nodes (minWorkers())
  int64_t node_rank = 0;
  std::string rdzv_host = "127.0.0.1";
  int rdzv_port = 0;  // 0: node 0 picks a free port (single node only)
  bool standalone = false;
  int64_t max_restarts = 3;
  double monitor_interval = 0.1;
  std::string run_id;
  std::string log_dir = "runs/logs";
  double stop_grace = 10.0;
  double rdzv_timeout = 60.0;
  double rdzv_last_call = 3.0;
  std::string preemption_notice;  // "" or a NoticeSource spec
  double preemption_grace = kDefaultPreemptionGraceSeconds;
  std::string bind_host;  // "" = the source address of the route to rdzv_host (base/bind_address.h)
  std::vector<std::string> command;    // PROGRAM ARGS…
  std::string experiment_path;         // the experiment YAML the command names, if any
  bool host_parameter_server = false;  // comm.algorithm: funnel — node 0 hosts it
  int metrics_port = 0;                // 0: no live metrics
  std::string metrics_host = "127.0.0.1";
  Recovery recovery = kDefaultRecovery;
  int64_t allocation_nodes = 0;          // SLURM_NNODES when it set --nnodes (slurm_env.h), else 0
  std::set<std::string> explicit_flags;  // flags given on the command line, e.g. "nproc-per-node"
  bool help = false;                     // --help was given and printed: exit 0
};

// Parses argv[1..]. Throws UsageError. `--help` prints the usage to `help_out` and returns
// options with `help` set (nothing else is checked then).
LaunchOptions parseLaunchArgs(const std::vector<std::string>& args,
                              std::ostream& help_out = std::cout);

// The fewest workers an in-place group trains on with (CUMULUS_MIN_WORKERS): --min-workers, or
// every worker of --nnodes MIN nodes.
int64_t minWorkers(const LaunchOptions& options);
// Throws UsageError when --min-workers is given with recovery by restart or is more than the
// job's workers (MAX × --nproc-per-node). Run once the experiment's launch: section applied;
// `what` names the setting ("--min-workers", "launch.min_workers") and `where` the file it came
// from, if any (" in x.yaml").
void checkMinWorkers(const LaunchOptions& options, const std::string& what = "--min-workers",
                     const std::string& where = "");

// Throws UsageError when --node-rank is not below the node count (MAX). parseLaunchArgs checks
// it only when --nnodes is given; applyExperimentLaunchSection checks it in every case.
void checkNodeRank(const LaunchOptions& options);

// "N" or "MIN:MAX" → {min, max}; throws UsageError naming `what`.
std::pair<int64_t, int64_t> parseNodeRange(const std::string& text, const std::string& what);
// "host:port" (IPv6 as "[::1]:port") → {host, port}; throws UsageError naming `what`.
std::pair<std::string, int> parseEndpoint(const std::string& text, const std::string& what);

}  // namespace cumulus::launch
