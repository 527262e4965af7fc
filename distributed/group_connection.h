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
#include <optional>
#include <stdexcept>
#include <string>

#include "base/run_env.h"
#include "comm/algorithm.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "cumulus/errors.h"
#include "cumulus/process_group.h"  // GroupOptions

namespace cumulus::comm {
class FunnelClient;
class StoreClient;
}  // namespace cumulus::comm

namespace cumulus::distributed {

// The launcher's variables for a worker of a group (base::RunEnv::fromGroupEnvironment: RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT are required). Throws GroupError naming the variable
// that is missing, not an integer or out of range ("RANK=3 must be in [0, WORLD_SIZE=2)").
base::RunEnv groupEnvironment(const base::EnvLookup& getenv = base::systemEnvironment);

// "host:port" → (host, port); throws GroupError naming `what` when malformed. "[::1]:80" works.
std::pair<std::string, int> parseEndpoint(const std::string& endpoint, const std::string& what);

// `seconds` as a duration, rounded up to the millisecond; GroupError "<what>: must be a positive
// number of seconds, got <seconds>" when it is not.
std::chrono::milliseconds timeoutOption(double seconds, const std::string& what);

// options.cost_model's file, loaded (the defaults when it is empty); GroupError "cost_model: ..."
// when it does not load. A group loads it once and hands it to each connection it makes.
comm::CostModel costModelOf(const GroupOptions& options);

class GroupConnection {
 public:
  // Connects to the Store at MASTER_ADDR:MASTER_PORT with the job token, to the parameter server
  // at CUMULUS_PS_ENDPOINT when the algorithm is funnel (GroupError if it is not set), and
  // rendezvous with the other ranks under generation CUMULUS_GENERATION (the fields of `env`).
  // With options.point_to_point, the communicator opens its point-to-point lanes too
  // (comm::CommunicatorOptions::point_to_point). GroupError for a timeout that is not a positive
  // number of seconds ("timeout_seconds: ...") or a cost model file that does not load
  // ("cost_model: ..."). `cost_model`: costModelOf(options), when the caller loaded it already;
  // empty: loaded here.
  GroupConnection(const base::RunEnv& env, const GroupOptions& options,
                  std::optional<comm::CostModel> cost_model = std::nullopt);
  // Over a caller-owned Store that outlives the group (tests: ranks as threads, a MemoryStore).
  // `env.store_host/port` are ignored.
  GroupConnection(const base::RunEnv& env, const GroupOptions& options, comm::Store& store,
                  std::optional<comm::CostModel> cost_model = std::nullopt);
  ~GroupConnection();
  GroupConnection(const GroupConnection&) = delete;
  GroupConnection& operator=(const GroupConnection&) = delete;

  int rank() const { return static_cast<int>(env_.rank); }
  int world() const { return static_cast<int>(env_.world_size); }
  const base::RunEnv& env() const { return env_; }
  const GroupOptions& options() const { return options_; }
  comm::Communicator& communicator() { return *communicator_; }
  cumulus::Algorithm algorithm() const { return options_.algorithm; }
  // options.timeout_seconds as a duration.
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void connect(comm::Store& store, std::optional<comm::CostModel> cost_model);
  const base::RunEnv env_;
  const GroupOptions options_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<comm::StoreClient> store_;    // null when the caller owns the Store
  std::unique_ptr<comm::FunnelClient> funnel_;  // funnel only; outlives the communicator
  std::unique_ptr<comm::Communicator> communicator_;
};

}  // namespace cumulus::distributed
