#include "base/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cumulus::base {

std::string fileKindOf(unsigned st_mode) {
  const mode_t mode = static_cast<mode_t>(st_mode);
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "an unknown kind of file";
}

Fd openRegularFile(const std::string& path, std::string& problem) {
  problem.clear();
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    problem = errno == ENOENT ? kNotFound : std::string("cannot open: ") + std::strerror(errno);
    return Fd();
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    problem = std::string("cannot stat: ") + std::strerror(errno);
    return Fd();
  }
  if (!S_ISREG(st.st_mode)) {
    problem = "is " + fileKindOf(st.st_mode) + ", not a regular file";
    return Fd();
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    problem = std::string("cannot make the descriptor blocking: ") + std::strerror(errno);
    return Fd();
  }
  return fd;
}

std::optional<std::string> readRegularFile(const std::string& path, std::string& problem,
                                           size_t at_most) {
  const Fd fd = openRegularFile(path, problem);
  if (!fd.valid()) return std::nullopt;
  std::string bytes;
  char chunk[1 << 16];
  while (bytes.size() < at_most) {
    const ssize_t n = ::read(fd.get(), chunk, std::min(sizeof chunk, at_most - bytes.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      problem = std::string("cannot read: ") + std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    bytes.append(chunk, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace cumulus::base
