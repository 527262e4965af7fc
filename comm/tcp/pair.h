#pragma once
// Pair: the established, authenticated connection to one peer rank (as gloo/transport/tcp/pair.h).
// It owns the socket; the transfer engine (transfer.h) drives it with non-blocking I/O.
//
// Thread-safety: used by one thread at a time (the communicator's executing thread), except
// abort(), which any thread may call to make a pending transfer fail at once.

#include <utility>

#include "comm/tcp/socket.h"

namespace cumulus::comm::tcp {

class Pair {
 public:
  Pair(Socket socket, int peer)
      : socket_(std::move(socket)), peer_(peer), unix_(socket_.isUnix()) {}

  int peer() const { return peer_; }
  // "unix" or "tcp": which stream carries this pair (comm/transport.h).
  const char* transport() const { return unix_ ? "unix" : "tcp"; }
  int fd() const { return socket_.fd(); }
  // Shuts the connection down in both directions: our own blocked poll() wakes up, and the peer
  // sees the connection close instead of waiting for its timeout.
  void abort() { socket_.shutdownBoth(); }

 private:
  Socket socket_;
  int peer_;
  bool unix_;
};

}  // namespace cumulus::comm::tcp
