#pragma once
// Which local address a node's data plane should bind, so peers on other hosts can reach it.

#include <chrono>
#include <string>

namespace cumulus::launch {

// The source address the kernel would use to reach `host` (a name or an IPv4/IPv6 address):
// resolves `host`, connect()s a UDP socket to it (no packet is sent) and reads getsockname().
// "127.0.0.1" for a loopback host. Throws std::runtime_error naming `host` when it does not
// resolve or no route leads to it. Blocks only for name resolution; thread-safe.
std::string routeSourceAddress(const std::string& host);

// Blocks until a TCP connect() to host:port succeeds (the connection is closed at once), trying
// every 50 ms, or `timeout` passes, or `interrupted` returns true. Returns whether it connected.
// Used before the first Store call of a node that may start before node 0: gRPC backs off for
// seconds after a refused connection, a plain connect() does not. Never throws.
bool waitUntilListening(const std::string& host, int port, std::chrono::milliseconds timeout,
                        bool (*interrupted)());

}  // namespace cumulus::launch
