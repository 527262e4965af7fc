#include "launch/options.h"

#include <algorithm>
#include <optional>

#include "base/enum_names.h"
#include "base/host_port.h"
#include "configs/schema.h"
#include "launch/preemption_notice.h"

namespace cumulus::launch {
namespace {

// Seconds flags: a decimal number from `min` up to a day.
CLI::Validator seconds(double min) { return base::numberIn(min, 86400.0, "seconds"); }

// The flags are declared bound to `o`; those whose value needs more than a range check parse it
// in their callback (so a mistake names the flag).

// Which nodes and workers make up the job, and where they meet.
void addGroupFlags(CLI::App& app, LaunchOptions& o) {
  app.add_option("--nproc-per-node", o.nproc_per_node, "workers on this node")
      ->type_name("N")
      ->transform(base::integerIn(1, 1024));
  app.add_option_function<std::string>(
         "--nnodes",
         [&](const std::string& v) {
           std::tie(o.min_nodes, o.max_nodes) = parseNodeRange(v, "nnodes");
         },
         "nodes in the job (default 1); MIN:MAX is elastic")
      ->type_name("N|MIN:MAX");
  app.add_option("--min-workers", o.min_workers,
                 "in place: the fewest workers the group trains on with; a notice to some "
                 "workers makes them leave while N remain (default: MIN nodes' workers)")
      ->type_name("N")
      ->transform(base::integerIn(1, 1048576));
  app.add_option("--node-rank", o.node_rank,
                 "this node's unique id, 0 ... MAX-1 (default 0 = the Store host)")
      ->type_name("I")
      ->transform(base::integerIn(0, 4095));
  app.add_option_function<std::string>(
         "--rdzv-endpoint",
         [&](const std::string& v) {
           std::tie(o.rdzv_host, o.rdzv_port) = parseEndpoint(v, "rdzv-endpoint");
         },
         "the rendezvous Store, hosted by node 0")
      ->type_name("H:P");
  app.add_flag("--standalone", o.standalone, "single node, Store on a free loopback port");
}

// How this node runs, watches, stops and restarts its workers.
void addRunFlags(CLI::App& app, LaunchOptions& o) {
  app.add_option("--max-restarts", o.max_restarts,
                 "group restarts after a crash or node loss (default 3)")
      ->type_name("K")
      ->transform(base::integerIn(0, 1000000));
  app.add_option("--monitor-interval", o.monitor_interval,
                 "seconds between worker health checks (default 0.1)")
      ->type_name("S")
      ->transform(seconds(0.001));
  app.add_option("--run-id", o.run_id, "job name (default: random)")
      ->type_name("ID")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (!v.empty() && v.find('/') == std::string::npos) return "";
            return "expected a non-empty name without '/', got \"" + v + "\"";
          },
          ""));
  app.add_option("--log-dir", o.log_dir, "per-rank logs and error file (default runs/logs)")
      ->type_name("DIR");
  app.add_option("--stop-grace", o.stop_grace,
                 "SIGTERM to SIGKILL delay when stopping workers (default 10)")
      ->type_name("S")
      ->transform(seconds(0));
  app.add_option("--rdzv-timeout", o.rdzv_timeout,
                 "wait for the Store and the other nodes (default 60)")
      ->type_name("S")
      ->transform(seconds(0.1));
  app.add_option("--rdzv-last-call", o.rdzv_last_call,
                 "elastic: close the rendezvous S s after the last joiner (default 3)")
      ->type_name("S")
      ->transform(seconds(0));
  app.add_option_function<std::string>(
         "--preemption-notice",
         [&](const std::string& v) {
           makeNoticeSource(v);  // validates the spec now, so a typo is a usage error
           o.preemption_notice = v;
         },
         "poll for a spot notice: aws, gcp, azure, auto, file:PATH or url:http://HOST:PORT/PATH "
         "(docs/launch.md)")
      ->type_name("SRC");
  app.add_option("--preemption-grace", o.preemption_grace,
                 "notice to all workers gone, checkpoint included (default " +
                     configs::formatNumber(kDefaultPreemptionGraceSeconds) + ")")
      ->type_name("S")
      ->transform(seconds(0.1));
  app.add_option("--bind-host", o.bind_host,
                 "this node's data-plane address (default: route to the Store)")
      ->type_name("H")
      ->check(base::nonEmpty("address or host name"));
  app.add_option_function<std::string>(
         "--recovery", [&](const std::string& v) { o.recovery = parseRecovery(v, "--recovery"); },
         "after a failure: restart the group, or go on in place (default " +
             std::string(recoveryName(kDefaultRecovery)) + ")")
      ->type_name("in_place|restart");
  app.add_option("--metrics-port", o.metrics_port,
                 "node 0 serves /metrics and the live dashboard on port P (default 0: off)")
      ->type_name("P")
      ->transform(base::integerIn(0, 65535));
  app.add_option("--metrics-host", o.metrics_host,
                 "the address --metrics-port binds (default 127.0.0.1)")
      ->type_name("H")
      ->check(base::nonEmpty("address"));
  app.add_flag("--parameter-server", o.host_parameter_server,
               "node 0 hosts the funnel's parameter server");
}

// torchrun spells its flags with '_' (--node_rank); both spellings are accepted. Only the flags
// before the program are rewritten, never the program's own arguments.
std::vector<std::string> withDashes(const CLI::App& app, std::vector<std::string> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--" || arg.rfind("--", 0) != 0) break;  // the program starts here
    const size_t eq = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(eq), '_', '-');
    const CLI::Option* option = app.get_option_no_throw(arg.substr(0, eq));
    if (option != nullptr && option->get_expected_max() > 0 && eq == arg.size()) ++i;  // value
  }
  return args;
}

// The checks that look at more than one flag.
void checkCombination(const LaunchOptions& o) {
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
}

}  // namespace

Recovery parseRecovery(const std::string& text, const std::string& what) {
  if (const std::optional<Recovery> recovery = base::valueNamed<Recovery>(text)) return *recovery;
  throw UsageError(what + ": must be in_place or restart, got '" + text + "'");
}

std::pair<int64_t, int64_t> parseNodeRange(const std::string& text, const std::string& what) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    int64_t n = base::parseInteger(text, "--" + what, 1, 4096);
    return {n, n};
  }
  int64_t lo = base::parseInteger(text.substr(0, colon), "--" + what, 1, 4096);
  int64_t hi = base::parseInteger(text.substr(colon + 1), "--" + what, 1, 4096);
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

int64_t minWorkers(const LaunchOptions& o) {
  return o.min_workers > 0 ? o.min_workers : o.min_nodes * o.nproc_per_node;
}

void checkMinWorkers(const LaunchOptions& o, const std::string& what, const std::string& where) {
  if (o.min_workers == 0) return;
  if (o.recovery != Recovery::kInPlace) {
    throw UsageError(what + where +
                     " needs --recovery in_place: with restart, a notice or a failure stops "
                     "every worker");
  }
  const int64_t workers = o.max_nodes * o.nproc_per_node;
  if (o.min_workers > workers) {
    throw UsageError(what + " " + std::to_string(o.min_workers) + where +
                     " is more than the job's " + std::to_string(workers) +
                     " worker(s) (--nnodes " + std::to_string(o.max_nodes) +
                     " × --nproc-per-node " + std::to_string(o.nproc_per_node) + ")");
  }
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

LaunchOptions parseLaunchArgs(const std::vector<std::string>& args, std::ostream& help_out) {
  LaunchOptions o;
  CLI::App app{"Starts the workers of one node and supervises them (torchrun-style).",
               "cumulus-run"};
  base::setUpCommandLine(app,
                         "0 every worker succeeded; 1 a worker failed with no restarts left, or a "
                         "node was lost; 2 usage or set-up error; 75 preempted after a checkpoint "
                         "(resumable); 128+N stopped by signal N",
                         "A PROGRAM argument ending in .yaml is read for its launch: section; "
                         "flags win.");
  app.positionals_at_end();  // everything from the program on is the program's
  addGroupFlags(app, o);
  addRunFlags(app, o);
  app.add_option("PROGRAM", o.command, "the worker and its arguments, after -- or the flags")
      ->type_name("");
  o.help = !base::parseCommandLine(app, withDashes(app, args), help_out);
  if (o.help) return o;
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() > 0 && !option->get_lnames().empty()) {
      o.explicit_flags.insert(option->get_lnames().front());
    }
  }
  checkCombination(o);
  return o;
}

}  // namespace cumulus::launch
