#pragma once
// What a job needs before its first group, set up once per cumulus-run: the run id and log
// directory, the job token, the rendezvous Store (hosted on node 0, a client on every node),
// this node's data-plane address, the preemption notice source and the rendezvous; and, per
// generation, the funnel's parameter server beside the Store on node 0. Used by the launcher
// (launcher.h) from its one thread; nothing here is thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "comm/parameter_server.h"
#include "comm/store_client.h"
#include "comm/store_server.h"
#include "launch/agent_console.h"
#include "launch/error_log.h"
#include "launch/group_store.h"
#include "launch/options.h"
#include "launch/preemption_notice.h"
#include "launch/rendezvous_round.h"

namespace cumulus::launch {

// A set-up problem of the job that the user must fix (exit code 2): the launcher's, as
// trainer::SetupError is a worker's.
class JobSetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline std::chrono::milliseconds toMs(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

struct Job {
  bool multi = false;  // a job of more than one node (--nnodes MAX > 1)
  bool host = false;   // this node hosts the Store (node 0)
  std::string token;
  std::string run_dir;
  std::unique_ptr<ErrorLog> errors;  // <run_dir>/errors.jsonl
  std::string store_host;
  int store_port = 0;
  std::string store_endpoint;  // host:port
  std::string bind_host;       // this node's data-plane address (CUMULUS_BIND_HOST)
  // Declared in the order they depend on each other, so they are destroyed the other way round.
  std::unique_ptr<comm::StoreServer> server;  // node 0 only
  std::unique_ptr<comm::StoreClient> store;
  std::unique_ptr<GroupStore> group_store;                  // the group protocol over `store`
  std::unique_ptr<comm::ParameterServer> parameter_server;  // node 0, funnel only
  std::string ps_endpoint;                                  // host:port when funnel
  std::unique_ptr<NoticeSource> notice;                     // --preemption-notice
  std::unique_ptr<RendezvousRound> rdzv;
};

// Sets up the job of `options` (filling options.run_id when it is empty) and says so on
// `console`. Node 0 starts the Store; the others wait for it to listen, up to --rdzv-timeout or
// until `interrupted` returns true. Throws JobSetupError for what the user must fix (a log
// directory that cannot be made, no CUMULUS_JOB_TOKEN on a multi-node job, the Store's port in use,
// an unroutable Store host) and std::runtime_error for the rest.
std::unique_ptr<Job> setUpJob(LaunchOptions& options, AgentConsole& console, bool (*interrupted)());

// The funnel's parameter server lives beside the Store, on node 0; it serves one world size, so a
// group of another size gets a new one. Node 0 (re)starts it and publishes its address for
// `generation`; the other nodes wait up to `timeout` to read it. Sets job.ps_endpoint. Throws
// JobSetupError when node 0 cannot start it, cumulus::CommError when the Store fails.
void prepareParameterServer(Job& job, AgentConsole& console, int64_t generation, int64_t world_size,
                            std::chrono::milliseconds timeout);

// MASTER_PORT of generation `generation`'s workers, torchrun's: a port free on node 0 for rank 0's
// own store (torch.distributed's env:// TCPStore; a C++ worker reads CUMULUS_STORE instead).
// Node 0 picks it and publishes it; the other nodes wait up to `timeout` to read it. Throws
// JobSetupError when node 0 cannot pick one, cumulus::CommError when the Store fails.
int prepareMasterPort(Job& job, int64_t generation, std::chrono::milliseconds timeout);

// Node 0 of a multi-node job (a no-op elsewhere): ends round `generation` so that nodes waiting in
// it exit with `exit_code`, saying `what` ended the job. Best effort: a Store failure is a
// console line. Blocks up to 5 s for the waiting nodes to read it.
void endWaiting(Job& job, AgentConsole& console, int64_t generation, int exit_code,
                const std::string& what);

}  // namespace cumulus::launch
