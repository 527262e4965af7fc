#pragma once
// The worker side of the funnel all-reduce: a RemoteReducer (comm/algorithm.h) that streams
// this rank's buffer to a ParameterServer (comm/parameter_server.h) in pieces of
// ParameterServer::kChunkBytes and receives the reduced buffer back, in place.
//
// allreduce() blocks until the result is in the buffer or throws CommError with op
// "allreduce/funnel", the seq, and peer = the rank the server blamed (a rank that disconnected,
// never pushed or sent a mismatching header) or -1 (the server itself):
//   kTimeout      no result within `timeout` (the server names the ranks that never pushed;
//                 "unreachable" when no connection could be made at all)
//   kPeerClosed   another rank (or this one) left mid-step, or the server shut down
//   kInvalid      world/dtype/op/count mismatch between ranks, rank out of range
//   kBadFrame     stale generation, or a result of the wrong size
//   kUnauthorized wrong job token
// The buffer holds garbage after an error. The call's deadline is `timeout` plus 1 s of
// margin: the server fails the step at `timeout`, so its error (which names ranks) wins.
//
// Thread-safe: concurrent allreduce() calls with different seqs run on the same connection.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/algorithm.h"

namespace cumulus::comm {

class FunnelClient final : public RemoteReducer {
 public:
  // host "" = 127.0.0.1. rank/world/generation go into every push header.
  FunnelClient(const std::string& host, int port, const std::string& token, int rank, int world,
               uint64_t generation = 0);
  ~FunnelClient() override;

  // Returns the request's payload: the serialized size of every PushChunk written (header and
  // data; gRPC's own framing is not counted).
  uint64_t allreduce(Buffer& buffer, ReduceOp op, uint64_t seq,
                     std::chrono::milliseconds timeout) override;

  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Impl;
  std::string endpoint_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus::comm
