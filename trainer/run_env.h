#pragma once
// The torchrun-style environment a worker is started with (see DESIGN.md "Processes"). A worker
// started by hand, without any of these variables, is rank 0 of a world of 1.
// No LibTorch here.

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

namespace cumulus::trainer {

class EnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RunEnv {
  int64_t rank = 0;              // RANK
  int64_t local_rank = 0;        // LOCAL_RANK
  int64_t world_size = 1;        // WORLD_SIZE
  int64_t local_world_size = 1;  // LOCAL_WORLD_SIZE
  int64_t group_rank = 0;        // GROUP_RANK (node index)
  std::string master_addr;       // MASTER_ADDR
  int64_t master_port = 0;       // MASTER_PORT
  std::string run_id;            // CUMULUS_RUN_ID
  int64_t restart_count = 0;     // CUMULUS_RESTART_COUNT
  int64_t generation = 0;        // CUMULUS_GENERATION

  // Reads the variables through `getenv` (std::getenv by default; tests pass a map lookup).
  // Throws EnvError naming the variable when a value is not an integer or is out of range
  // (RANK outside [0, WORLD_SIZE), LOCAL_RANK outside [0, LOCAL_WORLD_SIZE), sizes < 1), and when
  // only one of RANK and WORLD_SIZE is set.
  static RunEnv fromEnvironment(const std::function<const char*(const char*)>& getenv =
                                    [](const char* name) {
                                      return static_cast<const char*>(std::getenv(name));
                                    });
};

// Intra-op threads for this worker: `configured` if > 0, else the CPUs this process may run on
// divided by the workers on this node, at least 1.
int64_t intraOpThreads(int64_t configured, int64_t local_world_size);

}  // namespace cumulus::trainer
