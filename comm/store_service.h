#pragma once
// The Store's gRPC service without a server around it: the handlers StoreServer hosts, for callers
// that drive them in-process with their own requests (tests/fuzz/store_fuzz.cc). Internal to
// comm/; users start a StoreServer (comm/store_server.h), whose contract these handlers follow.
//
// A handler called with a ServerContext that belongs to no call sees no token metadata (so only
// an empty `token` accepts it), no client deadline and no cancellation: a Get or Wait for missing
// keys then waits for its whole wait_ms. Thread-safe.

#include <memory>
#include <string>

#include "proto/store.grpc.pb.h"

namespace cumulus::comm {

std::unique_ptr<proto::Store::Service> makeStoreService(const std::string& token);

}  // namespace cumulus::comm
