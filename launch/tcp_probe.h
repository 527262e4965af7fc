#pragma once
// Waiting for a TCP service to listen, without gRPC's reconnect backoff in the way.

#include <chrono>
#include <string>

namespace cumulus::launch {

// Blocks until a TCP connect() to host:port succeeds (the connection is closed at once), trying
// every 50 ms, or `timeout` passes, or `interrupted` (may be null) returns true. Returns whether
// it connected. cumulus-run calls it before the first Store call of a node that may start before
// node 0: after a refused connection gRPC backs off for seconds, a plain connect() does not.
// Never throws; thread-safe.
bool waitUntilListening(const std::string& host, int port, std::chrono::milliseconds timeout,
                        bool (*interrupted)());

}  // namespace cumulus::launch
