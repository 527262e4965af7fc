#include "checkpoint/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/fd.h"

namespace cumulus::checkpoint {

FileSystemError::FileSystemError(const std::string& path, const std::string& operation,
                                 int error_code)
    : std::runtime_error(path + ": " + operation + ": " + std::strerror(error_code)),
      path_(path),
      error_code_(error_code) {}

using base::Fd;

void PosixFileSystem::writeFile(const std::string& path, std::string_view data) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw FileSystemError(path, "open for writing", errno);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FileSystemError(path, "write", errno);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) throw FileSystemError(path, "fsync", errno);
  // A delayed write error (NFS) shows only here.
  if (const int error = fd.close(); error != 0) throw FileSystemError(path, "close", error);
}

std::string PosixFileSystem::readFile(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw FileSystemError(path, "open for reading", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw FileSystemError(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) throw FileSystemError(path, "read", EISDIR);
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FileSystemError(path, "read", errno);
    }
    if (n == 0) break;
    out.append(chunk, static_cast<size_t>(n));
  }
  return out;
}

void PosixFileSystem::createDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) throw FileSystemError(path, "mkdir", errno);
}

void PosixFileSystem::rename(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw FileSystemError(to, "rename from " + from, errno);
  }
}

void PosixFileSystem::exchange(const std::string& a, const std::string& b) {
#if defined(SYS_renameat2) && defined(RENAME_EXCHANGE)
  if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    throw FileSystemError(b, "exchange with " + a, errno);
  }
#else
  throw FileSystemError(b, "exchange with " + a, ENOSYS);
#endif
}

void PosixFileSystem::syncDir(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw FileSystemError(path, "open directory", errno);
  if (::fsync(fd.get()) != 0) throw FileSystemError(path, "fsync directory", errno);
}

std::vector<DirEntry> PosixFileSystem::list(const std::string& dir) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) throw FileSystemError(dir, "list", errno);
  std::vector<DirEntry> entries;
  errno = 0;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = entry->d_type == DT_DIR;
    if (entry->d_type == DT_UNKNOWN) {  // some file systems (XFS v4, NFS) leave d_type out
      struct stat st {};
      is_dir = ::stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    entries.push_back({name, is_dir});
    errno = 0;
  }
  const int error = errno;
  ::closedir(handle);
  if (error != 0) throw FileSystemError(dir, "list", error);
  return entries;
}

void PosixFileSystem::removeAll(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw FileSystemError(path, "stat", errno);
  }
  if (S_ISDIR(st.st_mode)) {
    for (const DirEntry& entry : list(path)) removeAll(path + "/" + entry.name);
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) throw FileSystemError(path, "rmdir", errno);
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw FileSystemError(path, "unlink", errno);
  }
}

bool PosixFileSystem::exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

uint64_t PosixFileSystem::availableBytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) throw FileSystemError(path, "statvfs", errno);
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

uint64_t PosixFileSystem::usedBytes(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return 0;
    throw FileSystemError(path, "stat", errno);
  }
  uint64_t bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  if (S_ISDIR(st.st_mode)) {
    for (const DirEntry& entry : list(path)) bytes += usedBytes(path + "/" + entry.name);
  }
  return bytes;
}

}  // namespace cumulus::checkpoint
