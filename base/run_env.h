#pragma once
// The one reader of the torchrun-style environment a worker is started with (docs/launch.md,
// "Environment of each worker"). A worker started by hand, without any of these variables, is
// rank 0 of a world of 1.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cumulus/errors.h"

namespace cumulus::base {

// A variable is malformed or out of range; the text names it and its value.
class EnvError : public UserError {
 public:
  using UserError::UserError;
};

// Looks a variable up; nullptr when it is not set. Production code passes systemEnvironment();
// tests pass a lookup in a map.
using EnvLookup = std::function<const char*(const char*)>;

// std::getenv. Not thread-safe against a concurrent setenv (POSIX).
const char* systemEnvironment(const char* name);

// std::getenv with the variables that place a process in the whole job hidden (RANK, WORLD_SIZE,
// GROUP_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE): for code that is given its rank and size (a group
// made over a Store, the torch.distributed backend, a recorder of a loop) and reads the rest of
// the environment, where a torch test's WORLD_SIZE without RANK is no error.
const char* memberEnvironment(const char* name);

struct RunEnv {
  int64_t rank = 0;              // RANK
  int64_t local_rank = 0;        // LOCAL_RANK
  int64_t world_size = 1;        // WORLD_SIZE
  int64_t local_world_size = 1;  // LOCAL_WORLD_SIZE
  int64_t group_rank = 0;        // GROUP_RANK (node index)
  // Where the rendezvous Store listens: CUMULUS_STORE (HOST:PORT, set by cumulus-run), else
  // MASTER_ADDR and MASTER_PORT (a group started by hand). Under cumulus-run MASTER_ADDR and
  // MASTER_PORT have torchrun's meaning instead: a free port on node 0 for rank 0's own store
  // (torch.distributed's env:// TCPStore), which Cumulus's C++ side does not read.
  std::string store_host;
  int64_t store_port = 0;  // 0: not set
  std::string run_id;      // CUMULUS_RUN_ID
  // CUMULUS_RESTART_COUNT and CUMULUS_GENERATION; under torchrun, where neither is set, both are
  // TORCHELASTIC_RESTART_COUNT (each restart of the group a generation of its own).
  int64_t restart_count = 0;
  int64_t generation = 0;
  std::string job_token;      // CUMULUS_JOB_TOKEN
  std::string ps_endpoint;    // CUMULUS_PS_ENDPOINT (host:port of a parameter server)
  std::string log_dir;        // CUMULUS_LOG_DIR
  std::string bind_host;      // CUMULUS_BIND_HOST
  bool live_metrics = false;  // CUMULUS_LIVE_METRICS=1

  // Reads the variables through `getenv`. An unset or empty variable keeps the default above.
  // Throws EnvError naming the variable when a value is not an integer or is out of range
  // (RANK outside [0, WORLD_SIZE), LOCAL_RANK outside [0, LOCAL_WORLD_SIZE), sizes < 1,
  // MASTER_PORT outside [0, 65535], a negative CUMULUS_GENERATION or CUMULUS_RESTART_COUNT), and
  // when only one of RANK and WORLD_SIZE is set. Thread-safe if `getenv` is.
  static RunEnv fromEnvironment(const EnvLookup& getenv = systemEnvironment);

  // The same for a process that only works as a member of a group (a probe, a collective
  // worker): RANK, WORLD_SIZE and the Store (CUMULUS_STORE, or MASTER_ADDR and MASTER_PORT) must
  // be set ("RANK is not set: " + `hint`), and the Store's port must be in [1, 65535].
  static RunEnv fromGroupEnvironment(const EnvLookup& getenv, const std::string& hint);

 private:
  static RunEnv read(const EnvLookup& getenv, int64_t minPort);
};

// What a user may set to tune the data plane (not cumulus-run's variables, but read here with
// them, so that every CUMULUS_* variable is read in this file): CUMULUS_TRANSPORT as given (comm
// checks the name) and CUMULUS_SPIN_US as a number. An unset or empty variable is nullopt.
// Throws EnvError for a CUMULUS_SPIN_US that is not an integer in [0, 1000000].
struct DataPlaneEnv {
  std::optional<std::string> transport;      // auto | tcp | unix | shm
  std::optional<int64_t> spin_microseconds;  // a receive's busy-wait before it sleeps
  static DataPlaneEnv fromEnvironment(const EnvLookup& getenv = systemEnvironment);
};

}  // namespace cumulus::base
