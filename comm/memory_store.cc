#include "comm/memory_store.h"

#include <cstdlib>

#include "base/integer.h"
#include "comm/error.h"

namespace cumulus::comm {

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    base::MutexLock lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  base::MutexLock lock(mutex_);
  auto it = values_.find(key);
  // A concurrent remove() between wait() and here counts as "missing", like a timeout.
  if (it == values_.end()) {
    throw CommError(ErrorKind::kTimeout, "store.get", 0, -1, "key '" + key + "' was removed");
  }
  return it->second;
}

std::optional<Bytes> MemoryStore::tryGet(const std::string& key) {
  base::MutexLock lock(mutex_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    base::MutexLock lock(mutex_);
    auto it = values_.find(key);
    int64_t current = 0;
    if (it != values_.end()) {
      const std::optional<int64_t> held = base::parseInteger(it->second);
      if (!held) {
        throw CommError(ErrorKind::kInvalid, "store.add", 0, -1,
                        "key '" + key + "' holds '" + it->second + "', not an integer");
      }
      current = *held;
    }
    result = current + delta;
    values_[key] = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

Bytes MemoryStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes result;
  {
    base::MutexLock lock(mutex_);
    auto it = values_.find(key);
    const bool matches = (it == values_.end()) ? expected.empty() : it->second == expected;
    if (!matches) return it == values_.end() ? Bytes() : it->second;
    values_[key] = desired;
    result = desired;
  }
  changed_.notify_all();
  return result;
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  base::MutexLock lock(mutex_);
  auto allPresent = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    for (const auto& key : keys) {
      if (values_.count(key) == 0) return false;
    }
    return true;
  };
  if (allPresent()) return;
  ++blocked_;
  const bool present = changed_.wait_until(lock, deadline, allPresent);
  --blocked_;
  if (present) return;
  std::string missing;
  for (const auto& key : keys) {
    if (values_.count(key) == 0) missing += (missing.empty() ? "'" : ", '") + key + "'";
  }
  throw CommError(
      ErrorKind::kTimeout, "store.wait", 0, -1,
      "keys still missing after " + std::to_string(timeout.count()) + " ms: " + missing);
}

int MemoryStore::blockedCalls() const {
  base::MutexLock lock(mutex_);
  return blocked_;
}

bool MemoryStore::remove(const std::string& key) {
  base::MutexLock lock(mutex_);
  return values_.erase(key) > 0;
}

int64_t MemoryStore::removePrefix(const std::string& prefix) {
  base::MutexLock lock(mutex_);
  int64_t removed = 0;
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = values_.erase(it);
    ++removed;
  }
  return removed;
}

}  // namespace cumulus::comm
