#pragma once
// The parameter server's gRPC service without a server around it: the PushPull handler that
// ParameterServer hosts (comm/parameter_server.h states its contract), callable in-process over any
// stream. For callers that drive it with their own messages (tests/fuzz/parameter_server_fuzz.cc);
// users start a ParameterServer. Internal to comm/.
//
// A call whose ServerContext belongs to no RPC sees no token metadata (only an empty token accepts
// it) and is never cancelled: a rank waiting for the others waits until its header's timeout_ms,
// forever when that is 0. Thread-safe: one stream per thread, as under a gRPC server.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "proto/parameter_server.grpc.pb.h"

namespace cumulus::comm {

using PushPullStream = grpc::ServerReaderWriterInterface<proto::PullChunk, proto::PushChunk>;

class PushPullHandler {
 public:
  virtual ~PushPullHandler() = default;
  // One worker's PushPull call: its pushes in, the reduced buffer out, the status it ends with.
  virtual grpc::Status pushPull(grpc::ServerContext& context, PushPullStream& stream) = 0;
};

// world ≥ 1.
std::unique_ptr<PushPullHandler> makeParameterServerService(const std::string& token, int world);

}  // namespace cumulus::comm
