#pragma once
// Which local address a node's data plane should bind, so peers on other hosts can reach it.

#include <string>

namespace cumulus::base {

// The source address the kernel would use to reach `host` (a name or an IPv4/IPv6 address):
// resolves `host`, connect()s a UDP socket to it (no packet is sent) and reads getsockname().
// "127.0.0.1" for a loopback host. Throws std::runtime_error naming `host` when it does not
// resolve or no route leads to it. Blocks only for name resolution; thread-safe.
std::string routeSourceAddress(const std::string& host);

// A TCP port that nothing on this host listens on now: the kernel's pick for a socket bound to
// port 0 of every IPv4 address, closed again. Another program may take it before the caller's
// own program binds it (torchrun's MASTER_PORT has the same race). Throws std::runtime_error
// with the errno text when no socket can be bound.
int pickFreePort();

}  // namespace cumulus::base
