#pragma once
// Which local address a node's data plane should bind, so peers on other hosts can reach it.

#include <string>

namespace cumulus::base {

// The source address the kernel would use to reach `host` (a name or an IPv4/IPv6 address):
// resolves `host`, connect()s a UDP socket to it (no packet is sent) and reads getsockname().
// "127.0.0.1" for a loopback host. Throws std::runtime_error naming `host` when it does not
// resolve or no route leads to it. Blocks only for name resolution; thread-safe.
std::string routeSourceAddress(const std::string& host);

}  // namespace cumulus::base
