// cumulus-spot: runs a job under a seeded trace of spot preemptions and reports what they cost.
//
//   cumulus-spot [flags] -- COMMAND [ARGS...]
//
// COMMAND is typically a cumulus-run command line; it must resume by itself from the newest
// checkpoint (cumulus-train does, under cumulus-run). See launch/spot_runner.h and spot_trace.h.
// Flags (--flag=value or --flag value; CLI11 through base/command_line.h):
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
#include <stdexcept>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "launch/spot_runner.h"

namespace {

using namespace cumulus::launch;
namespace base = cumulus::base;

constexpr const char* kProgram = "cumulus-spot";
constexpr int64_t kMaxCount = 1000000000;

struct SpotFlags {
  SpotOptions options;
  SpotReportOptions report;
  bool quiet = false;
  int64_t print_trace = -1;
};

CLI::Validator seconds() { return base::numberIn(0, 1e6, "seconds"); }

void addFlags(CLI::App& app, SpotFlags& f) {
  SpotTraceOptions& trace = f.options.trace;
  app.add_option("--seed", trace.seed, "trace seed (default 0)")
      ->type_name("N")
      ->transform(base::integerIn(0, INT64_MAX));
  app.add_option("--mean-interval", trace.mean_interval_s,
                 "mean seconds from a launch's start to its notice (default 60; 0: none)")
      ->type_name("S")
      ->transform(seconds());
  app.add_option("--notice", trace.notice_s, "notice period before the kill (default 10)")
      ->type_name("S")
      ->transform(seconds());
  app.add_option("--relaunch-delay", trace.relaunch_delay_s,
                 "seconds between an exit and the next launch (default 1)")
      ->type_name("S")
      ->transform(seconds());
  app.add_option_function<std::string>(
         "--world-sizes",
         [&trace](const std::string& v) {
           trace.world_sizes = parseWorldSizes(v, "--world-sizes");
         },
         "world size per launch, cycled (default: the command's)")
      ->type_name("2,1,2");
  app.add_option("--max-preemptions", trace.max_preemptions,
                 "launches from the N-th on are not preempted (default 100)")
      ->type_name("N")
      ->transform(base::integerIn(0, kMaxCount));
  app.add_option("--notice-file", f.options.notice_file,
                 "create PATH as the notice instead of sending SIGTERM")
      ->type_name("PATH");
  app.add_option("--metrics", f.options.metrics_path,
                 "the job's <trainer.run_dir>/metrics.jsonl, for what each launch did")
      ->type_name("PATH");
  app.add_option("--baseline-seconds", f.report.baseline_seconds,
                 "wall time of an uninterrupted run, for the goodput ratio")
      ->type_name("S")
      ->transform(seconds());
  app.add_option("--global-batch", f.report.global_batch,
                 "samples per step, for goodput in samples/s")
      ->type_name("B")
      ->transform(base::integerIn(1, kMaxCount));
  app.add_option("--timeout", f.options.timeout_s, "give up after S seconds in all (default 3600)")
      ->type_name("S")
      ->transform(seconds());
  app.add_option("--max-crashes", f.options.max_crashes,
                 "relaunches after non-zero exits without a notice (default 3)")
      ->type_name("N")
      ->transform(base::integerIn(0, kMaxCount));
  app.add_flag("--quiet", f.quiet, "do not echo the job's output");
  app.add_option("--print-trace", f.print_trace, "print the first N launches of the trace and exit")
      ->type_name("N")
      ->transform(base::integerIn(0, kMaxCount));
  app.add_option("COMMAND", f.options.command,
                 "the job and its arguments, typically a cumulus-run command line")
      ->type_name("");
}

int runMain(int argc, char** argv) {
  CLI::App app{"Runs a job under a seeded trace of spot preemptions and reports what they cost.",
               kProgram};
  base::setUpCommandLine(app, "0 the job completed, 1 it did not (crashes, timeout), 2 usage",
                         "Output: the job's output (prefixed \"[spot I] \"), a table, and one "
                         "JSON line last.\nWithout --metrics the report has the launches' times "
                         "and exits only.");
  app.positionals_at_end();  // everything from the command on is the command's
  SpotFlags flags;
  addFlags(app, flags);
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  SpotOptions& options = flags.options;
  if (flags.print_trace >= 0) {
    std::cout << SpotTrace(options.trace).describe(flags.print_trace);
    return 0;
  }
  if (options.command.empty()) throw base::UsageError("no job command; give it after --");
  commandFor(options.command, options.trace.world_sizes.empty() ? 0 : options.trace.world_sizes[0]);
  if (!flags.quiet) options.echo = &std::cout;

  const SpotRun run = runSpot(options);
  const SpotReport report = summarize(run.records, flags.report);
  std::cout << reportTable(run.records, report);
  if (run.timed_out) std::cout << "timed out after " << options.timeout_s << " s\n";
  std::cout << reportJson(report) << std::endl;
  return report.completed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const std::invalid_argument& e) {
    // The trace and the command are checked by the library (spot_trace.h, spot_runner.h) with
    // std::invalid_argument: a usage mistake here.
    return base::reportError(kProgram, base::UsageError(e.what()));
  } catch (const std::exception& e) {
    return base::reportError(kProgram, e);
  }
}
