// cumulus-spot: runs a job under a seeded trace of spot preemptions and reports what they cost.
//
//   cumulus-spot [flags] -- COMMAND [ARGS...]
//
// COMMAND is typically a cumulus-run command line; it must resume by itself from the newest
// checkpoint (cumulus-train does, under cumulus-run). See launch/spot_runner.h and spot_trace.h.
// Flags (--flag=value or --flag value):
//   --seed N               trace seed (default 0)
//   --mean-interval S      mean seconds from a launch's start to its notice (default 60; 0: none)
//   --notice S             notice period before the kill (default 10)
//   --relaunch-delay S     seconds between an exit and the next launch (default 1)
//   --world-sizes LIST     world size per launch, cycled, e.g. 2,1,2 (default: the command's)
//   --max-preemptions N    launches from the N-th on are not preempted (default 100)
//   --notice-file PATH     create PATH as the notice instead of sending SIGTERM
//   --metrics PATH         the job's metrics.jsonl (<trainer.run_dir>/metrics.jsonl): what each
//                          launch did (steps, checkpoints, stops) is read from it; without it
//                          the report has the launches' times and exits only
//   --baseline-seconds S   wall time of an uninterrupted run, for the goodput ratio
//   --global-batch B       samples per step, for goodput in samples/s
//   --timeout S            give up after S seconds in all (default 3600)
//   --max-crashes N        relaunches after non-zero exits without a notice (default 3)
//   --quiet                do not echo the job's output
//   --print-trace N        print the first N launches of the trace and exit
// Output: the job's output (prefixed "[spot I] "), a table, and one JSON line last.
// Exit codes: 0 the job completed; 1 it did not (crashes, timeout); 2 usage.

#include <cstdint>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch/spot_runner.h"

namespace {

using namespace cumulus::launch;

constexpr const char* kUsage =
    "usage: cumulus-spot [--seed N] [--mean-interval S] [--notice S] [--relaunch-delay S]\n"
    "                    [--world-sizes 2,1,2] [--max-preemptions N] [--notice-file PATH]\n"
    "                    [--metrics RUN_DIR/metrics.jsonl]\n"
    "                    [--baseline-seconds S] [--global-batch B] [--timeout S]\n"
    "                    [--max-crashes N] [--quiet] [--print-trace N] -- COMMAND [ARGS...]\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double number(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) {
    throw UsageError(flag + ": '" + text + "' is not a number");
  }
  return value;
}

int64_t integer(const std::string& flag, const std::string& text) {
  const double value = number(flag, text);
  if (value != static_cast<double>(static_cast<int64_t>(value))) {
    throw UsageError(flag + ": '" + text + "' is not an integer");
  }
  return static_cast<int64_t>(value);
}

int runMain(int argc, char** argv) {
  SpotOptions options;
  SpotReportOptions report_options;
  bool quiet = false;
  int64_t print_trace = -1;
  const std::vector<std::string> valued = {
      "--seed",         "--mean-interval",   "--notice",      "--relaunch-delay",
      "--world-sizes",  "--max-preemptions", "--notice-file", "--baseline-seconds",
      "--global-batch", "--timeout",         "--max-crashes", "--print-trace",
      "--metrics"};
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--quiet") {
      quiet = true;
      continue;
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    bool known = false;
    for (const std::string& v : valued) known = known || v == arg;
    if (!known) throw UsageError(arg + ": unknown flag; see --help");
    if (eq == std::string::npos) {
      if (i + 1 >= argc) throw UsageError(arg + ": needs a value");
      value = argv[++i];
    }
    if (arg == "--seed") options.trace.seed = static_cast<uint64_t>(integer(arg, value));
    if (arg == "--mean-interval") options.trace.mean_interval_s = number(arg, value);
    if (arg == "--notice") options.trace.notice_s = number(arg, value);
    if (arg == "--relaunch-delay") options.trace.relaunch_delay_s = number(arg, value);
    if (arg == "--world-sizes") options.trace.world_sizes = parseWorldSizes(value, arg);
    if (arg == "--max-preemptions") options.trace.max_preemptions = integer(arg, value);
    if (arg == "--notice-file") options.notice_file = value;
    if (arg == "--metrics") options.metrics_path = value;
    if (arg == "--baseline-seconds") report_options.baseline_seconds = number(arg, value);
    if (arg == "--global-batch") report_options.global_batch = integer(arg, value);
    if (arg == "--timeout") options.timeout_s = number(arg, value);
    if (arg == "--max-crashes") options.max_crashes = integer(arg, value);
    if (arg == "--print-trace") print_trace = integer(arg, value);
  }
  if (print_trace >= 0) {
    std::cout << SpotTrace(options.trace).describe(print_trace);
    return 0;
  }
  for (; i < argc; ++i) options.command.emplace_back(argv[i]);
  if (options.command.empty()) throw UsageError("no job command; give it after --");
  commandFor(options.command, options.trace.world_sizes.empty() ? 0 : options.trace.world_sizes[0]);
  if (!quiet) options.echo = &std::cout;

  const SpotRun run = runSpot(options);
  const SpotReport report = summarize(run.records, report_options);
  std::cout << reportTable(run.records, report);
  if (run.timed_out) std::cout << "timed out after " << options.timeout_s << " s\n";
  std::cout << reportJson(report) << std::endl;
  return report.completed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "cumulus-spot: error: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "cumulus-spot: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cumulus-spot: error: " << e.what() << "\n";
    return 1;
  }
}
