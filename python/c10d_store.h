#pragma once
// Cumulus's rendezvous Store (<cumulus/store.h>) over the c10d Store that torch.distributed hands a
// backend: the ranks of a `backend="cumulus"` group meet through the store the script already
// has (env://'s TCPStore, a FileStore, torchrun's), with no second rendezvous service.
//
// c10d has no prefix listing: removePrefix() removes nothing and returns 0 (the keys are under
// the group's own prefix, which torch discards with the group). A c10d failure or timeout is
// re-raised as CommError (kStore, or kTimeout naming the keys), as the gRPC Store's are.
// Thread-safety: as the wrapped store's (c10d's TCPStore serializes its calls).

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>
#include <vector>

#include "cumulus/store.h"

namespace c10d {
class Store;
}

namespace cumulus::python {

class C10dStore final : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store);
  ~C10dStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> tryGet(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool remove(const std::string& key) override;
  int64_t removePrefix(const std::string& prefix) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace cumulus::python
