#pragma once
// The one non-blocking TCP/Unix connect with a deadline. Used where a caller must not wait for
// the kernel's own connect timeout (minutes, for a host that drops SYNs).

#include <sys/socket.h>

#include <chrono>

#include "base/fd.h"

namespace cumulus::base {

struct Connected {
  Fd fd;          // the connected socket (left non-blocking, close-on-exec); invalid on failure
  int error = 0;  // 0, ETIMEDOUT when the deadline passed first, or the errno connect failed with
};

// Opens a socket for `address` and connects it, blocking at most until `deadline` (a deadline in
// the past still makes one non-blocking attempt). Does not retry: a refused connect returns
// ECONNREFUSED at once. Thread-safe.
Connected connectBefore(const sockaddr* address, socklen_t length,
                        std::chrono::steady_clock::time_point deadline);

}  // namespace cumulus::base
