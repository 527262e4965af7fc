#include "base/connect.h"

#include <poll.h>

#include <cerrno>

namespace cumulus::base {
namespace {

// Milliseconds to `deadline` for poll(), rounded up so that a wait never ends early; 0 if past.
int msUntil(std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > 1000000 ? 1000000 : static_cast<int>(ms);
}

}  // namespace

Connected connectBefore(const sockaddr* address, socklen_t length,
                        std::chrono::steady_clock::time_point deadline) {
  Connected out;
  out.fd.reset(::socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!out.fd.valid()) {
    out.error = errno;
    return out;
  }
  if (::connect(out.fd.get(), address, length) == 0) return out;
  int error = errno;
  // EINTR on a non-blocking connect also means "in progress": the kernel goes on with it.
  if (error == EINPROGRESS || error == EINTR) {
    for (;;) {
      pollfd waiter{out.fd.get(), POLLOUT, 0};
      const int rc = ::poll(&waiter, 1, msUntil(deadline));
      if (rc > 0) {
        socklen_t size = sizeof error;
        if (::getsockopt(out.fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
        break;
      }
      if (rc == 0) {
        error = ETIMEDOUT;
        break;
      }
      if (errno != EINTR) {
        error = errno;
        break;
      }
    }
  }
  if (error != 0) {
    out.fd.reset();
    out.error = error;
  }
  return out;
}

}  // namespace cumulus::base
