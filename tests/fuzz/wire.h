#pragma once
// A connected AF_UNIX socket pair for the data-plane fuzz targets: our end is a net::Socket as the
// transport makes them (non-blocking), the other end receives the fuzzed bytes as if a peer had
// sent them and then closed its sending side. No network, nothing on disk.

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "comm/net/socket.h"
#include "tests/fuzz/fuzz_check.h"

namespace cumulus::fuzz {

struct Wire {
  comm::net::Socket ours;
  int theirs = -1;

  // `bytes` are what the peer sent; what does not fit the socket buffer is dropped.
  Wire(const uint8_t* bytes, size_t size) {
    int fds[2];
    check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0,
          "socketpair failed");
    ours = comm::net::Socket(fds[0]);
    theirs = fds[1];
    while (size > 0) {
      const ssize_t n = ::send(theirs, bytes, size, MSG_NOSIGNAL);
      if (n <= 0) break;
      bytes += n;
      size -= static_cast<size_t>(n);
    }
    ::shutdown(theirs, SHUT_WR);
  }
  ~Wire() { ::close(theirs); }
  Wire(const Wire&) = delete;
  Wire& operator=(const Wire&) = delete;
};

}  // namespace cumulus::fuzz
