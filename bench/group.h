#pragma once
// A group of `world` rank processes on loopback for one benchmark run: the coordinator hosts a
// StoreServer (and optionally a ParameterServer), then forks/execs this same binary once per
// rank with --worker and the torchrun-style environment (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CUMULUS_JOB_TOKEN and, with a parameter server,
// CUMULUS_PS_ENDPOINT). A worker reads that environment back with WorkerEnv::fromEnvironment(),
// through base::RunEnv.

#include <chrono>
#include <string>

namespace cumulus::bench {

struct WorkerEnv {
  int rank = 0;
  int world = 1;
  int store_port = 0;
  int ps_port = 0;  // 0 = no parameter server
  std::string token;
  // Throws base::EnvError (a std::runtime_error) naming a missing or malformed variable.
  static WorkerEnv fromEnvironment();
};

// Runs the workers and waits for them. Returns 0 when all exit 0; otherwise kills the rest,
// prints which rank failed how, and returns 1. `argv` is the coordinator's own argv.
int runGroup(int argc, char** argv, int world, bool withParameterServer,
             std::chrono::milliseconds timeout);

}  // namespace cumulus::bench
