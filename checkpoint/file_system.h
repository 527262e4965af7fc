#pragma once
// The few file operations that checkpoints need, behind an interface so that tests can inject
// faults (a full disk, a failing fsync) without a real broken disk (STYLE: "File access goes
// through an interface that tests can replace").
//
// Every method throws FileSystemError on failure; its text names the path, the operation and the
// errno text ("/ckpt/step-00000100.tmp/model.pt: write: No space left on device"). No method
// retries or swallows an error. Calls block on the disk; none takes a timeout because POSIX file
// I/O cannot be cancelled. An implementation is thread-safe if its calls on distinct paths may
// run concurrently (PosixFileSystem is; so is the tests' FaultInjectingFileSystem).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cumulus::checkpoint {

class FileSystemError : public std::runtime_error {
 public:
  // Builds "<path>: <operation>: <strerror(error_code)>".
  FileSystemError(const std::string& path, const std::string& operation, int error_code);
  int errorCode() const { return error_code_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int error_code_;
};

struct DirEntry {
  std::string name;  // the last path component, never "." or ".."
  bool is_dir = false;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates `path` (truncating an existing file), writes all of `data` and fsyncs the file before
  // returning. On failure the file may exist with any prefix of `data`; the caller removes it.
  virtual void writeFile(const std::string& path, std::string_view data) = 0;
  // The whole content of a regular file.
  virtual std::string readFile(const std::string& path) = 0;
  // mkdir(path, 0755). Throws if it exists.
  virtual void createDir(const std::string& path) = 0;
  // rename(2): atomic on POSIX file systems; replaces `to` only if it is a file or an empty dir.
  virtual void rename(const std::string& from, const std::string& to) = 0;
  // Atomically swaps two existing directories (renameat2 RENAME_EXCHANGE). Throws FileSystemError
  // with errorCode() EINVAL or ENOSYS where the file system cannot do it.
  virtual void exchange(const std::string& a, const std::string& b) = 0;
  // fsync of a directory, which makes the creations and renames inside it durable.
  virtual void syncDir(const std::string& path) = 0;
  // Entries of `dir` in no particular order.
  virtual std::vector<DirEntry> list(const std::string& dir) = 0;
  // Removes a file or a whole directory tree. A path that does not exist is not an error.
  virtual void removeAll(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  // Bytes an unprivileged user may still write on the file system that holds `path` (statvfs
  // f_bavail x f_frsize).
  virtual uint64_t availableBytes(const std::string& path) = 0;
  // Bytes that `path`, a file or a whole directory tree, takes on its disk (the blocks allocated,
  // st_blocks x 512, which deleting it gives back); 0 when it does not exist.
  virtual uint64_t usedBytes(const std::string& path) = 0;
};

// The real thing: open/write/fsync/close, rename(2), renameat2(2), opendir/readdir, unlink/rmdir.
class PosixFileSystem : public FileSystem {
 public:
  void writeFile(const std::string& path, std::string_view data) override;
  std::string readFile(const std::string& path) override;
  void createDir(const std::string& path) override;
  void rename(const std::string& from, const std::string& to) override;
  void exchange(const std::string& a, const std::string& b) override;
  void syncDir(const std::string& path) override;
  std::vector<DirEntry> list(const std::string& dir) override;
  void removeAll(const std::string& path) override;
  bool exists(const std::string& path) override;
  uint64_t availableBytes(const std::string& path) override;
  uint64_t usedBytes(const std::string& path) override;
};

}  // namespace cumulus::checkpoint
