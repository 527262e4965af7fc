#pragma once
// The rank side of each cumulus-bench command. Each runs in one worker process of a group
// (bench/group.h), builds a Communicator over the group's Store, and rank 0 prints the report.
// Return the process exit code; CommError and friends propagate to main().

#include "bench/options.h"

namespace cumulus::bench {

// Table + JSON lines of busbw per size (see allreduce_bench.cc for the definitions).
int runAllreduceWorker(const BenchOptions& options);
// Measures α, β, γ with 2 ranks and saves them with comm::CostModel::save(options.out); with
// --busy-phase, measures the busy_at table instead and adds it to that file.
int runCalibrateWorker(const BenchOptions& options);
// The coordinator of `calibrate`: the 2-rank group, then the oversubscribed one.
int runCalibrate(int argc, char** argv, const BenchOptions& options);

}  // namespace cumulus::bench
