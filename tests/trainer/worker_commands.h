#pragma once
// Test helper: the command lines and environment of workers started as a user starts them, for the
// tests that run cumulus-train, cumulus-run and cumulus-train-faults as processes. No LibTorch.
// Needs CUMULUS_BINARY_DIR (the build directory), as trainer_test defines it.

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"  // kTrain, kRun
#include "tests/trainer/process_runner.h"

namespace cumulus::testing {

using Env = std::vector<std::pair<std::string, std::string>>;
using Args = std::vector<std::string>;

inline const std::string kTrainFaultsBinary = CUMULUS_BINARY_DIR "/bin/cumulus-train-faults";

// The same worker command (argv[0] cumulus-train) run by cumulus-train-faults with `faults` (its
// flags) installed.
inline Args withFaults(Args faults, const Args& train_argv) {
  Args argv = {kTrainFaultsBinary};
  for (auto& f : faults) argv.push_back(std::move(f));
  argv.push_back("--");
  argv.insert(argv.end(), train_argv.begin() + 1, train_argv.end());
  return argv;
}

// `workers` copies of the worker command under cumulus-run --standalone, logs in `log_dir`.
inline Args groupOf(int workers, const std::string& log_dir, Args train_argv,
                    Args launch_flags = {}) {
  Args argv = {kRun, "--standalone", "--nproc-per-node=" + std::to_string(workers),
               "--log-dir=" + log_dir, "--monitor-interval=0.02"};
  for (auto& f : launch_flags) argv.push_back(std::move(f));
  argv.push_back("--");
  for (auto& a : train_argv) argv.push_back(std::move(a));
  return argv;
}

// The environment of a worker started by hand (the test itself may run under a launcher).
inline Env aloneEnv(Env extra = {}) {
  Env env = {{"WORLD_SIZE", ""},           {"RANK", ""},
             {"LOCAL_RANK", ""},           {"LOCAL_WORLD_SIZE", ""},
             {"CUMULUS_RUN_ID", ""},       {"MASTER_ADDR", ""},
             {"MASTER_PORT", ""},          {"CUMULUS_GENERATION", ""},
             {"CUMULUS_RESTART_COUNT", ""}};
  for (auto& e : extra) env.push_back(std::move(e));
  return env;
}

// Every "final parameters sha256" in `output`, in order: one per replica that printed its own.
inline std::vector<std::string> everyDigest(const std::string& output) {
  const std::string marker = "final parameters sha256 ";
  std::vector<std::string> digests;
  for (size_t at = 0; (at = output.find(marker, at)) != std::string::npos; at += marker.size()) {
    digests.push_back(output.substr(at + marker.size(), 64));
  }
  return digests;
}

// The "final parameters sha256" rank 0 printed; a non-zero exit or a missing line is a failure.
inline std::string digestOf(const ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string digest = lastAfter(r.output, "final parameters sha256 ");
  EXPECT_EQ(digest.size(), 64u) << r.output;
  return digest;
}

}  // namespace cumulus::testing
