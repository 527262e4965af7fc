// cumulus-bench: collective benchmarks. See bench/options.cc for the usage and
// bench/results/allreduce.md for measured results and the exact commands.

#include <cstdio>
#include <exception>

#include "bench/bench.h"
#include "bench/group.h"
#include "bench/options.h"

int main(int argc, char** argv) {
  using namespace cumulus::bench;
  BenchOptions options;
  try {
    options = parseOptions(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cumulus-bench: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    if (options.worker)
      return options.command == "allreduce" ? runAllreduceWorker(options)
                                            : runCalibrateWorker(options);
    if (options.command == "calibrate") return runCalibrate(argc, argv, options);
    const bool funnel = options.algorithm == cumulus::comm::Algorithm::kFunnel;
    return runGroup(argc, argv, options.world, funnel, options.timeout * 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cumulus-bench%s: %s\n", options.worker ? " worker" : "", e.what());
    return 1;
  }
}
