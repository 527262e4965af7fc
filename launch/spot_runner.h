#pragma once
// cumulus-spot's driver: runs a job command again and again under a SpotTrace until it exits 0.
//
// Each launch starts `command` (with the trace's world size put in, see commandFor) as a
// WorkerProcess. At the trace's notice time the notice goes out: SIGTERM to the job's main process
// only (cumulus-run forwards it to its workers), or, with notice_file set, that file is created
// (for agents that poll a notice file). If the job is still running notice_s later, its whole
// process group is SIGKILLed: the instance is gone. An exit during the notice period, whatever its
// code, is a preemption; a non-zero exit without a notice is a crash, relaunched up to max_crashes
// times. Between launches it waits relaunch_delay_s. The job must resume by itself (cumulus-train
// --resume auto, the default under cumulus-run).
//
// After each launch the run's metrics.jsonl (metrics_path) is read for what the launch did
// (observeMetrics); the console is only echoed to `echo` if set, never parsed. Blocks until
// the job completes, gives up (crashes), or timeout_s passes (then the job is killed and the
// report says completed: no). Not thread-safe; run from one thread (WorkerProcess's PDEATHSIG
// follows the spawning thread).

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "launch/spot_report.h"
#include "launch/spot_trace.h"

namespace cumulus::launch {

struct SpotOptions {
  SpotTraceOptions trace;
  std::vector<std::string> command;
  std::string notice_file;   // empty: SIGTERM
  std::string metrics_path;  // the job's metrics.jsonl; empty: launches and exits only
  double timeout_s = 3600;
  int64_t max_crashes = 3;
  std::ostream* echo = nullptr;  // the job's output, each line prefixed "[spot N] "
};

struct SpotRun {
  std::vector<LaunchRecord> records;
  bool timed_out = false;
};

// `command` for a launch with `world_size` (0: unchanged): every "{world}" in an argument is
// replaced by it; without a placeholder, a command whose program is cumulus-run gets
// "--nproc-per-node=W" right after the program. Throws std::invalid_argument if neither applies.
std::vector<std::string> commandFor(const std::vector<std::string>& command, int64_t world_size);

SpotRun runSpot(const SpotOptions& options);

}  // namespace cumulus::launch
