#pragma once
// MemoryStore: the Store of one process (tests, single-process groups of threads).
//
// Contract: see comm/store.h. Every method is thread-safe; get() and wait() block on a condition
// variable until the keys exist or the timeout expires, then throw CommError(kTimeout, op
// "store.get"/"store.wait", peer -1) naming the keys still missing.

#include <map>

#include "base/annotated_mutex.h"
#include "comm/store.h"

namespace cumulus::comm {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout = kDefaultTimeout) override;
  std::optional<Bytes> tryGet(const std::string& key) override;
  // Throws CommError(kInvalid) if the existing value is not a decimal integer.
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout = kDefaultTimeout) override;
  bool remove(const std::string& key) override;
  int64_t removePrefix(const std::string& prefix) override;
  // get() and wait() calls blocked right now for keys still missing (as StoreServer's), so an
  // observer can tell that a reader is waiting instead of guessing it by time. Non-blocking.
  int blockedCalls() const;

 private:
  mutable base::Mutex mutex_;
  base::CondVar changed_;  // notified on every insertion
  std::map<std::string, Bytes> values_ ABSL_GUARDED_BY(mutex_);
  int blocked_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace cumulus::comm
