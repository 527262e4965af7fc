#pragma once
// A FileSystem that forwards to another one and injects the faults a real disk produces, for
// tests of the checkpoint commit protocol:
//   - a full disk: once `bytes` more bytes have been written in total, the write that crosses the
//     limit stores only the part below it and fails with ENOSPC (or another errno), as write(2)
//     does after a short write; later writes fail at once;
//   - a failing fsync: every fsync of a file or directory whose path ends with a given suffix
//     fails with EIO after the data was written (the kernel's "lost write" report);
//   - a failing rename, or a file system without renameat2's RENAME_EXCHANGE.
// Faults stay armed until clear(). Thread-safe: the background checkpoint writer may call it while
// the test thread arms faults.

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>

#include "base/annotated_mutex.h"
#include "checkpoint/file_system.h"

namespace cumulus::checkpoint {

class FaultInjectingFileSystem : public FileSystem {
 public:
  explicit FaultInjectingFileSystem(FileSystem& base) : base_(base) {}

  // Fails writes once `bytes` more bytes have been written (counting from this call).
  void failWritesAfter(uint64_t bytes, int error_code = ENOSPC);
  // Fails every fsync (file or directory) whose path ends with `suffix`.
  void failSyncOf(const std::string& suffix, int error_code = EIO);
  // Fails the next `times` renames (or exchanges) whose destination ends with `suffix`; times < 0:
  // all of them.
  void failRenameTo(const std::string& suffix, int error_code = EIO, int times = -1);
  // Makes exchange() fail with ENOSYS, like a file system without renameat2 (until clear()).
  void disableExchange();
  // Makes availableBytes() answer `bytes` (until clear()).
  void reportAvailable(uint64_t bytes);
  void clear();
  // Bytes written through this object since construction.
  uint64_t bytesWritten() const;

  void writeFile(const std::string& path, std::string_view data) override;
  std::string readFile(const std::string& path) override { return base_.readFile(path); }
  void createDir(const std::string& path) override { base_.createDir(path); }
  void rename(const std::string& from, const std::string& to) override;
  void exchange(const std::string& a, const std::string& b) override;
  void syncDir(const std::string& path) override;
  std::vector<DirEntry> list(const std::string& dir) override { return base_.list(dir); }
  void removeAll(const std::string& path) override { base_.removeAll(path); }
  bool exists(const std::string& path) override { return base_.exists(path); }
  uint64_t availableBytes(const std::string& path) override;
  uint64_t usedBytes(const std::string& path) override { return base_.usedBytes(path); }

 private:
  struct PathFault {
    std::string suffix;
    int error_code = 0;
    int times = -1;  // failures left; < 0: unlimited
  };
  // Throws if `fault` is armed and matches `path`.
  static void check(const std::optional<PathFault>& fault, const std::string& path,
                    const std::string& operation);

  FileSystem& base_;
  mutable base::Mutex mutex_;
  uint64_t written_ ABSL_GUARDED_BY(mutex_) = 0;
  std::optional<uint64_t> write_limit_ ABSL_GUARDED_BY(mutex_);  // absolute in written_ units
  int write_error_ ABSL_GUARDED_BY(mutex_) = 0;
  std::optional<PathFault> sync_fault_ ABSL_GUARDED_BY(mutex_);
  bool exchange_disabled_ ABSL_GUARDED_BY(mutex_) = false;
  std::optional<PathFault> rename_fault_ ABSL_GUARDED_BY(mutex_);
  std::optional<uint64_t> available_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace cumulus::checkpoint
