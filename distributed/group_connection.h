#pragma once
// GroupConnection: this worker's membership in the job's group — the Store client, the
// communicator (data plane, comm/communicator.h) and, for the funnel algorithm,
// the parameter-server client — built from the launcher's environment and the `comm` section of
// the experiment. No LibTorch.
//
// Blocking: construction performs the rendezvous and blocks until every rank is connected or
// comm.timeout_seconds expires. Errors: GroupError naming the missing or malformed environment
// variable or config key; cumulus::CommError (kStore "store HOST:PORT unreachable …",
// kRendezvous, kUnauthorized, kTimeout) from the Store and the rendezvous, unchanged.
//
// Thread-safety: the accessors are; the Communicator is (see comm/communicator.h).

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "base/run_env.h"
#include "comm/algorithm.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "configs/experiment.h"
#include "cumulus/errors.h"

namespace cumulus::comm {
class FunnelClient;
class StoreClient;
}  // namespace cumulus::comm

namespace cumulus::trainer {

// The launcher's variables for a worker of a group (base::RunEnv::fromGroupEnvironment: RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT are required). Throws GroupError naming the variable
// that is missing, not an integer or out of range ("RANK=3 must be in [0, WORLD_SIZE=2)").
base::RunEnv groupEnvironment(const base::EnvLookup& getenv = base::systemEnvironment);

// "host:port" → (host, port); throws GroupError naming `what` when malformed. "[::1]:80" works.
std::pair<std::string, int> parseEndpoint(const std::string& endpoint, const std::string& what);

class GroupConnection {
 public:
  // Connects to the Store at MASTER_ADDR:MASTER_PORT with the job token, to the parameter server
  // at CUMULUS_PS_ENDPOINT when comm.algorithm is funnel (GroupError if it is not set), and
  // rendezvous with the other ranks under generation CUMULUS_GENERATION (the fields of `env`).
  // With `point_to_point`, the communicator opens its point-to-point lanes too
  // (comm::CommunicatorOptions::point_to_point).
  GroupConnection(const base::RunEnv& env, const configs::CommConfig& config,
                  bool point_to_point = false);
  // Over a caller-owned Store that outlives the group (tests: ranks as threads, a MemoryStore).
  // `env.store_host/port` are ignored.
  GroupConnection(const base::RunEnv& env, const configs::CommConfig& config, comm::Store& store,
                  bool point_to_point = false);
  ~GroupConnection();
  GroupConnection(const GroupConnection&) = delete;
  GroupConnection& operator=(const GroupConnection&) = delete;

  int rank() const { return static_cast<int>(env_.rank); }
  int world() const { return static_cast<int>(env_.world_size); }
  const base::RunEnv& env() const { return env_; }
  const configs::CommConfig& config() const { return config_; }
  comm::Communicator& communicator() { return *communicator_; }
  // comm.algorithm, parsed.
  cumulus::Algorithm algorithm() const { return algorithm_; }
  // comm.timeout_seconds.
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void connect(comm::Store& store);
  // comm.timeout_seconds as a duration; GroupError if not positive.
  static std::chrono::milliseconds timeoutOf(const configs::CommConfig& config);

  const base::RunEnv env_;
  const configs::CommConfig config_;
  const bool point_to_point_;
  cumulus::Algorithm algorithm_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<comm::StoreClient> store_;    // null when the caller owns the Store
  std::unique_ptr<comm::FunnelClient> funnel_;  // funnel only; outlives the communicator
  std::unique_ptr<comm::Communicator> communicator_;
};

}  // namespace cumulus::trainer
