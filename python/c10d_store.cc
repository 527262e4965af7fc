// C10dStore (python/c10d_store.h): a cumulus::Store over a c10d::Store.

#include "python/c10d_store.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <exception>
#include <utility>

#include "cumulus/errors.h"

namespace cumulus::python {
namespace {

std::vector<uint8_t> bytesOf(const std::string& value) {
  return std::vector<uint8_t>(value.begin(), value.end());
}

std::string stringOf(const std::vector<uint8_t>& value) {
  return std::string(value.begin(), value.end());
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& key : keys) out += (out.empty() ? "" : ", ") + key;
  return out;
}

// Runs `call` on the c10d store; its failure becomes a CommError of `kind` naming `what`.
template <typename Fn>
auto guarded(CommErrorKind kind, const std::string& what, Fn&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(kind, "store", 0, -1, what + ": " + e.what());
  }
}

}  // namespace

C10dStore::C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
C10dStore::~C10dStore() = default;

void C10dStore::set(const std::string& key, const std::string& value) {
  guarded(CommErrorKind::kStore, "torch.distributed store set " + key,
          [&] { store_->set(key, bytesOf(value)); });
}

std::string C10dStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  return guarded(CommErrorKind::kStore, "torch.distributed store get " + key,
                 [&] { return stringOf(store_->get(key)); });
}

std::optional<std::string> C10dStore::tryGet(const std::string& key) {
  const bool present = guarded(CommErrorKind::kStore, "torch.distributed store check " + key,
                               [&] { return store_->check({key}); });
  if (!present) return std::nullopt;
  return guarded(CommErrorKind::kStore, "torch.distributed store get " + key,
                 [&] { return stringOf(store_->get(key)); });
}

int64_t C10dStore::add(const std::string& key, int64_t delta) {
  return guarded(CommErrorKind::kStore, "torch.distributed store add " + key,
                 [&] { return store_->add(key, delta); });
}

std::string C10dStore::compareSet(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  return guarded(CommErrorKind::kStore, "torch.distributed store compare_set " + key, [&] {
    return stringOf(store_->compareSet(key, bytesOf(expected), bytesOf(desired)));
  });
}

void C10dStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  guarded(CommErrorKind::kTimeout,
          "waited " + std::to_string(timeout.count()) + " ms for " + joined(keys),
          [&] { store_->wait(keys, timeout); });
}

bool C10dStore::remove(const std::string& key) {
  return guarded(CommErrorKind::kStore, "torch.distributed store delete " + key,
                 [&] { return store_->deleteKey(key); });
}

int64_t C10dStore::removePrefix(const std::string&) { return 0; }

}  // namespace cumulus::python
