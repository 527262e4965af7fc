#pragma once
// FileStore: a Store over a directory, so that separate processes of a test can rendezvous
// without a server. One file per key (written to a temporary name, then renamed, so readers see
// whole values); add/compareSet serialize on an flock()ed lock file; blocking calls poll every
// millisecond until their timeout. Test-only: the real cross-host Store is the gRPC one.
//
// Thread- and process-safe.

#include <string>

#include "comm/store.h"

namespace cumulus::comm::testing {

class FileStore : public Store {
 public:
  explicit FileStore(std::string directory);  // the directory must exist

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
  std::string pathOf(const std::string& key) const;
  std::string directory_;
};

}  // namespace cumulus::comm::testing
