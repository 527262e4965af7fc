#pragma once
// <cumulus/store.h>: the key-value store the ranks of a group meet through.
//
// A group's ranks publish their addresses in it and read each other's (the rendezvous); the
// elastic API keeps its quorum records in it. Cumulus has two of its own, the gRPC store that
// cumulus-run hosts and an in-process one for tests, and a program may bring its own: the Python
// package hands a group torch.distributed's store (TCPStore, FileStore, torchrun's) through this
// interface. ProcessGroup::overStore (<cumulus/process_group.h>) builds a group over any of them.
//
// The contract an implementation keeps:
//  - every method is safe to call from several threads at once;
//  - values are opaque bytes (std::string), keys are printable strings;
//  - a blocking call waits at most its timeout, then throws CommError with kind kTimeout naming the
//    keys still missing; an unreachable store throws CommError kStore, a refused token
//    kUnauthorized (<cumulus/errors.h>).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cumulus {

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{30000};

  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists (up to timeout), then returns its value.
  virtual std::string get(const std::string& key,
                          std::chrono::milliseconds timeout = kDefaultTimeout) = 0;
  // Non-blocking read: nullopt when `key` does not exist.
  virtual std::optional<std::string> tryGet(const std::string& key) = 0;
  // Atomically adds `delta` to the integer at `key` (missing = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its current value is `expected` (a missing key matches an empty
  // `expected`). Returns the value after the call.
  virtual std::string compareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) = 0;
  // Blocks until every key exists.
  virtual void wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout = kDefaultTimeout) = 0;
  // Returns whether the key existed.
  virtual bool remove(const std::string& key) = 0;
  // Removes every key that starts with `prefix` (a finished generation's); returns how many. A
  // store that cannot list its keys removes none and returns 0.
  virtual int64_t removePrefix(const std::string& prefix) = 0;
};

}  // namespace cumulus
