#pragma once
// The gRPC server behind the rendezvous Store (comm/store.h), hosted by the launcher's agent.
//
// - Binds 127.0.0.1 unless a host is named ("0.0.0.0" for every interface); port 0 picks a free
//   port, read back with port(). A taken port throws std::runtime_error naming it.
// - Every call must carry the job token in the `x-cumulus-token` metadata entry; a wrong or
//   missing token gets UNAUTHENTICATED and changes nothing. An empty server token accepts only
//   calls whose token is empty or missing.
// - Messages are capped at kMaxValueBytes + 64 KiB both ways; a key is at most kMaxKeyBytes.
// - A blocking Get/Wait returns when its keys exist, its wait expires, the client's deadline
//   passes or the client cancels, or the server shuts down (ABORTED "store server shutting
//   down"): no handler thread outlives shutdown().
// - Keys of a restart generation live under "gen/<g>/"; DeletePrefix drops a stale generation.
// - Add on a key holding a non-integer, or whose sum would overflow int64, is INVALID_ARGUMENT
//   and changes nothing. A Get/Wait asking to wait over 30 days
//   (rpc::kMaxWaitMs) waits 30 days.
//
// Thread-safe. The destructor calls shutdown().

#include <cstddef>
#include <memory>
#include <string>

#include "base/annotated_mutex.h"

namespace grpc {
class Server;
}

namespace cumulus::comm {

class StoreService;

class StoreServer {
 public:
  static constexpr size_t kMaxValueBytes = 4u << 20;
  static constexpr size_t kMaxKeyBytes = 4096;

  // host "" means 127.0.0.1.
  StoreServer(const std::string& host, int port, const std::string& token);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // Get/Wait handlers blocked right now (for monitoring and tests).
  int blockedCalls() const;
  // Wakes blocked calls, stops accepting new ones, and waits (≤ 1 s) for running ones. Idempotent.
  void shutdown();

 private:
  std::string host_;
  int port_ = 0;
  std::unique_ptr<StoreService> service_;
  base::Mutex shutdown_mutex_;
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(shutdown_mutex_);  // null after shutdown
};

}  // namespace cumulus::comm
