#pragma once
// The rendezvous key-value Store (as gloo/rendezvous/store.h): ranks publish their data-plane
// addresses and meet. Two implementations share this interface: MemoryStore (tests, one process)
// and the gRPC StoreClient (talking to a StoreServer hosted by the launcher).
//
// All methods are thread-safe. Every blocking call takes a timeout; on expiry it throws
// CommError(kTimeout) naming the keys still missing. Unreachable servers throw CommError(kStore)
// naming the endpoint and how long it was tried; a wrong token throws CommError(kUnauthorized).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cumulus::comm {

using Bytes = std::string;  // values are opaque bytes

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{30000};

  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists (up to timeout), then returns its value.
  virtual Bytes get(const std::string& key,
                    std::chrono::milliseconds timeout = kDefaultTimeout) = 0;
  // Non-blocking read.
  virtual std::optional<Bytes> tryGet(const std::string& key) = 0;
  // Atomically adds `delta` to the integer at `key` (missing = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its current value is `expected` (missing key matches an empty
  // `expected`). Returns the value after the call.
  virtual Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Blocks until every key exists.
  virtual void wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout = kDefaultTimeout) = 0;
  // Returns whether the key existed.
  virtual bool remove(const std::string& key) = 0;
  // Removes every key that starts with `prefix` (e.g. a finished generation); returns how many.
  virtual int64_t removePrefix(const std::string& prefix) = 0;
};

}  // namespace cumulus::comm
