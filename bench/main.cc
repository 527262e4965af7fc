// cumulus-bench: collective benchmarks. See bench/options.cc for the flags (or cumulus-bench
// --help) and bench/results/allreduce.md for measured results and the exact commands.

#include <exception>

#include "base/command_line.h"
#include "bench/bench.h"
#include "bench/group.h"
#include "bench/options.h"

namespace {

int run(int argc, char** argv) {
  using namespace cumulus::bench;
  const BenchOptions options = parseOptions(argc, argv);
  if (options.help) return 0;
  if (options.worker)
    return options.command == "allreduce" ? runAllreduceWorker(options)
                                          : runCalibrateWorker(options);
  if (options.command == "calibrate") return runCalibrate(argc, argv, options);
  const bool funnel = options.algorithm == cumulus::Algorithm::kFunnel;
  return runGroup(argc, argv, options.world, funnel, options.timeout * 2);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError("cumulus-bench", e);
  }
}
