#pragma once
// Two connected ends of an AF_UNIX stream socket, non-blocking like every net::Socket: a wire
// for tests that drive one end by hand.

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <utility>

#include "comm/net/socket.h"

namespace cumulus::comm::testing {

inline std::pair<net::Socket, net::Socket> socketPair() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {net::Socket(fds[0]), net::Socket(fds[1])};
}

}  // namespace cumulus::comm::testing
