#pragma once
// The Store (comm/store.h) over gRPC, talking to a StoreServer (comm/store_server.h).
//
// Every call carries the job token and has a deadline: rpc_timeout for a plain call, the wait
// plus a margin for a blocking get/wait (the server answers "missing" before the client gives
// up, so the timeout error can name the keys). While no connection can be made, idempotent calls
// are retried for connect_timeout, then fail with
//   CommError(kStore) "store 127.0.0.1:29500 unreachable for 10.0 s (connection refused)".
// add() is retried only when the call provably never reached the server.
// Errors: kUnauthorized for a rejected token, kTimeout for an expired get/wait (naming the
// missing keys), kInvalid for a value over StoreServer::kMaxValueBytes, kStore otherwise
// (including "store server shutting down" during a blocking call).
//
// Thread-safe; one connection per client.

#include <chrono>
#include <memory>
#include <string>

#include "comm/store.h"

namespace cumulus::comm {

struct StoreClientOptions {
  std::chrono::milliseconds connect_timeout{10000};  // how long an unreachable server is retried
  std::chrono::milliseconds rpc_timeout{10000};      // deadline of a non-blocking call
};

class StoreClient final : public Store {
 public:
  StoreClient(const std::string& host, int port, const std::string& token,
              StoreClientOptions options = {});
  ~StoreClient() override;

  const std::string& endpoint() const { return endpoint_; }

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout = kDefaultTimeout) override;
  std::optional<Bytes> tryGet(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout = kDefaultTimeout) override;
  bool remove(const std::string& key) override;
  int64_t removePrefix(const std::string& prefix) override;

 private:
  struct Impl;
  std::string endpoint_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus::comm
