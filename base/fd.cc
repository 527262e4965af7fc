#include "base/fd.h"

#include <unistd.h>

#include <cerrno>

namespace cumulus::base {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset(int fd) {
  close();
  fd_ = fd < 0 ? -1 : fd;
}

int Fd::close() {
  if (fd_ < 0) return 0;
  // Linux frees the descriptor even when close fails (EINTR included), so it is never retried:
  // a retry could close a descriptor another thread has just been given.
  const int rc = ::close(release());
  return rc == 0 ? 0 : errno;
}

}  // namespace cumulus::base
