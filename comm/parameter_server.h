#pragma once
// The funnel parameter server (docs/comm.md, "Algorithms"): `world` workers each stream their
// buffer for one step, identified by (generation, seq), over the bidirectional PushPull call of
// proto/parameter_server.proto; once every rank has pushed, the server streams the reduced
// buffer back to each of them. FunnelClient (comm/funnel.h) is the worker side.
//
// Determinism: the buffer is cut into pieces of kChunkBytes. Piece k of the result is
// rank 0's piece k, then reduceInto(rank 1's), then rank 2's, … in rank order, whatever order
// the pieces arrive in: a piece that arrives before its predecessors waits in memory. Different
// pieces are reduced in parallel by whichever handler thread completes their predecessor chain.
// So for a fixed world size the result is bit-identical from run to run, and avg divides once
// at the end (comm/reduce.h).
//
// Failures end the step for every rank of it, each of which gets the same grpc::Status; the
// server then forgets the step (the last 1024 failures are remembered, so a late rank gets the
// error at once instead of waiting):
// - wrong or missing token (x-cumulus-token): UNAUTHENTICATED, nothing else happens;
// - a header whose world/dtype/op/count differs from the step's or whose world is not the
//   server's, a rank out of range or pushed twice: INVALID_ARGUMENT naming that rank;
// - a generation older than the newest one seen: FAILED_PRECONDITION; a newer generation
//   fails every step of the older ones (ABORTED, "superseded");
// - a rank that disconnects, cancels or half-closes before its whole buffer arrived, or leaves
//   before the result is ready: ABORTED naming the rank;
// - the ranks still missing when the first waiter's timeout_ms (at most 30 days) expires:
//   DEADLINE_EXCEEDED naming them; shutdown: UNAVAILABLE.
// A failed rank is reported in the trailing metadata entry `x-cumulus-rank`.
//
// Limits: messages ≤ kChunkBytes + 64 KiB; a step ≤ kMaxStepBytes (the server holds one
// accumulator per step, plus pieces that arrived early).
// Thread-safe. Binds 127.0.0.1 unless a host is named; port 0 = ephemeral.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/annotated_mutex.h"

namespace grpc {
class Server;
}

namespace cumulus::comm {

class ParameterServerService;

class ParameterServer {
 public:
  static constexpr size_t kChunkBytes = 4u << 20;  // a multiple of every element size
  static constexpr size_t kMaxStepBytes = size_t{2} << 30;

  // host "" = 127.0.0.1; world ≥ 1. Throws std::runtime_error if the port cannot be bound.
  ParameterServer(const std::string& host, int port, const std::string& token, int world);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  int world() const { return world_; }
  // Fails running steps (UNAVAILABLE), stops accepting calls, waits ≤ 1 s for handlers. Idempotent.
  void shutdown();

  // What the server holds of one running step: the ranks whose header arrived (joined) and
  // those whose whole buffer arrived and who now wait for the result (pushed), ascending. Both
  // empty when no such step runs (not begun, or already finished or failed). Non-blocking. Lets
  // an observer (a test, a status page) wait for a state instead of guessing it by time.
  struct StepProgress {
    std::vector<int> joined;
    std::vector<int> pushed;
  };
  StepProgress progress(uint64_t generation, uint64_t seq) const;

 private:
  std::string host_;
  int port_ = 0;
  int world_;
  std::unique_ptr<ParameterServerService> service_;
  base::Mutex shutdown_mutex_;
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(shutdown_mutex_);  // null after shutdown
};

}  // namespace cumulus::comm
