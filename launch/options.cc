#include "launch/options.h"

#include "base/host_port.h"
#include "launch/preemption_notice.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

namespace cumulus::launch {
namespace {

int64_t parseInt(const std::string& text, const std::string& flag, int64_t min, int64_t max) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
    throw UsageError("--" + flag + ": expected an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got \"" + text + "\"");
  }
  return v;
}

double parseSeconds(const std::string& text, const std::string& flag, double min) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= min) || v > 86400.0) {
    std::ostringstream msg;
    msg << "--" << flag << ": expected seconds >= " << min << ", got \"" << text << "\"";
    throw UsageError(msg.str());
  }
  return v;
}

}  // namespace

std::string usageText() {
  return "usage: cumulus-run [flags] -- PROGRAM [ARGS...]\n"
         "  --nproc-per-node N     workers on this node\n"
         "  --nnodes N|MIN:MAX     nodes in the job (default 1)\n"
         "  --node-rank I          this node's unique id, 0 ... MAX-1 (default 0 = the Store "
         "host)\n"
         "  --rdzv-endpoint H:P    the rendezvous Store, hosted by node 0\n"
         "  --standalone           single node, Store on a free loopback port\n"
         "  --max-restarts K       group restarts after a crash or node loss (default 3)\n"
         "  --monitor-interval S   seconds between worker health checks (default 0.1)\n"
         "  --run-id ID            job name (default: random)\n"
         "  --log-dir DIR          per-rank logs and error file (default runs/logs)\n"
         "  --stop-grace S         SIGTERM to SIGKILL delay when stopping workers (default 10)\n"
         "  --rdzv-timeout S       wait for the Store and the other nodes (default 60)\n"
         "  --rdzv-last-call S     elastic: close the rendezvous S s after the last joiner "
         "(default 3)\n"
         "  --preemption-notice SRC  poll for a spot notice: aws (IMDSv2; its rebalance\n"
         "                         recommendation makes the workers checkpoint and go on:\n"
         "                         SIGUSR1), gcp, azure (Scheduled Events), auto (whichever\n"
         "                         answers), file:PATH, or url:http://HOST:PORT/PATH speaking\n"
         "                         AWS's, Azure's or GCP's protocol by its path\n"
         "  --preemption-grace S   notice to all workers gone, checkpoint included (default 25)\n"
         "  --bind-host H          this node's data-plane address (default: route to the Store)\n"
         "  --parameter-server     node 0 hosts the funnel's parameter server\n"
         "A PROGRAM argument ending in .yaml is read for its launch: section; flags win.\n";
}

std::pair<int64_t, int64_t> parseNodeRange(const std::string& text, const std::string& what) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    int64_t n = parseInt(text, what, 1, 4096);
    return {n, n};
  }
  int64_t lo = parseInt(text.substr(0, colon), what, 1, 4096);
  int64_t hi = parseInt(text.substr(colon + 1), what, 1, 4096);
  if (lo > hi) {
    throw UsageError("--" + what + ": MIN:MAX needs MIN <= MAX, got \"" + text + "\"");
  }
  return {lo, hi};
}

std::pair<std::string, int> parseEndpoint(const std::string& text, const std::string& what) {
  std::string problem;
  std::optional<base::HostPort> parsed = base::parseHostPort(text, &problem);
  if (!parsed) throw UsageError("--" + what + ": " + problem);
  return {std::move(parsed->host), parsed->port};
}

void checkNodeRank(const LaunchOptions& o) {
  if (o.node_rank < o.max_nodes) return;
  if (o.min_nodes != o.max_nodes) {
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is out of range for " +
                     "--nnodes " + std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes) +
                     " (node ids are 0 … MAX-1, one per node)");
  }
  throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " +
                   std::to_string(o.max_nodes) + " (ranks are 0 … nnodes-1)");
}

LaunchOptions parseLaunchArgs(const std::vector<std::string>& args) {
  LaunchOptions o;
  using Setter = std::function<void(const std::string&)>;
  const std::map<std::string, Setter> with_value = {
      {"nproc-per-node",
       [&](const std::string& v) { o.nproc_per_node = parseInt(v, "nproc-per-node", 1, 1024); }},
      {"nnodes",
       [&](const std::string& v) {
         std::tie(o.min_nodes, o.max_nodes) = parseNodeRange(v, "nnodes");
       }},
      {"node-rank", [&](const std::string& v) { o.node_rank = parseInt(v, "node-rank", 0, 4095); }},
      {"rdzv-endpoint",
       [&](const std::string& v) {
         std::tie(o.rdzv_host, o.rdzv_port) = parseEndpoint(v, "rdzv-endpoint");
       }},
      {"max-restarts",
       [&](const std::string& v) { o.max_restarts = parseInt(v, "max-restarts", 0, 1000000); }},
      {"monitor-interval",
       [&](const std::string& v) {
         o.monitor_interval = parseSeconds(v, "monitor-interval", 0.001);
       }},
      {"run-id",
       [&](const std::string& v) {
         if (v.empty() || v.find('/') != std::string::npos) {
           throw UsageError("--run-id: expected a non-empty name without '/', got \"" + v + "\"");
         }
         o.run_id = v;
       }},
      {"log-dir", [&](const std::string& v) { o.log_dir = v; }},
      {"stop-grace",
       [&](const std::string& v) { o.stop_grace = parseSeconds(v, "stop-grace", 0); }},
      {"preemption-notice",
       [&](const std::string& v) {
         makeNoticeSource(v);  // validates the spec now, so a typo is a usage error
         o.preemption_notice = v;
       }},
      {"preemption-grace",
       [&](const std::string& v) {
         o.preemption_grace = parseSeconds(v, "preemption-grace", 0.1);
       }},
      {"bind-host",
       [&](const std::string& v) {
         if (v.empty()) throw UsageError("--bind-host: expected an address or host name");
         o.bind_host = v;
       }},
      {"rdzv-timeout",
       [&](const std::string& v) { o.rdzv_timeout = parseSeconds(v, "rdzv-timeout", 0.1); }},
      {"rdzv-last-call",
       [&](const std::string& v) { o.rdzv_last_call = parseSeconds(v, "rdzv-last-call", 0); }},
  };

  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") throw UsageError(usageText());
    if (arg.rfind("--", 0) != 0) break;  // first positional: the program
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    std::replace(name.begin(), name.end(), '_', '-');
    if (name == "standalone") {
      if (has_value) throw UsageError("--standalone takes no value");
      o.standalone = true;
      o.explicit_flags.insert(name);
      continue;
    }
    if (name == "parameter-server") {
      if (has_value) throw UsageError("--parameter-server takes no value");
      o.host_parameter_server = true;
      o.explicit_flags.insert(name);
      continue;
    }
    auto it = with_value.find(name);
    if (it == with_value.end()) {
      throw UsageError("unknown flag --" + name + " (see cumulus-run --help)");
    }
    if (!has_value) {
      if (i + 1 >= args.size()) throw UsageError("--" + name + " needs a value");
      value = args[++i];
    }
    it->second(value);
    o.explicit_flags.insert(name);
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.command.empty()) {
    throw UsageError("no program to run: cumulus-run [flags] -- PROGRAM [ARGS...]");
  }
  if (o.standalone && (o.max_nodes > 1 || o.explicit_flags.count("rdzv-endpoint"))) {
    throw UsageError(
        "--standalone runs one node with its own Store; drop --nnodes/--rdzv-endpoint");
  }
  // Without --nnodes the count may still come from Slurm or the experiment (main.cc applies
  // them next); checkNodeRank() runs once they have.
  if (o.explicit_flags.count("nnodes")) checkNodeRank(o);
  if (o.max_nodes > 1 && !o.explicit_flags.count("rdzv-endpoint")) {
    throw UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address)");
  }
  return o;
}

}  // namespace cumulus::launch
