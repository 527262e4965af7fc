#pragma once
// Pair: the established, authenticated connection to one peer rank (as gloo/transport/tcp/pair.h).
// It owns the socket and, between ranks on one host that agreed on it, the shared-memory channel
// that carries large payloads (comm/shm/channel.h); the transfer engine (transfer.h) drives both
// with non-blocking I/O.
//
// Thread-safety: used by one thread at a time (the communicator's executing thread), except
// abort(), which any thread may call to make a pending transfer fail at once.

#include <memory>
#include <utility>

#include "comm/shm/channel.h"
#include "comm/tcp/socket.h"

namespace cumulus::comm::tcp {

class Pair {
 public:
  Pair(Socket socket, int peer, std::unique_ptr<shm::Channel> channel = nullptr)
      : socket_(std::move(socket)),
        peer_(peer),
        unix_(socket_.isUnix()),
        channel_(std::move(channel)) {}

  int peer() const { return peer_; }
  // "shm", "unix" or "tcp": what carries this pair's payloads (comm/transport.h).
  const char* transport() const { return channel_ ? "shm" : unix_ ? "unix" : "tcp"; }
  int fd() const { return socket_.fd(); }
  // The shared-memory channel, or null (every payload inline on the socket).
  shm::Channel* channel() const { return channel_.get(); }
  // Shuts the connection down in both directions: our own blocked poll() wakes up (a wait for a
  // shared-memory slot polls the socket too), and the peer sees the connection close instead of
  // waiting for its timeout.
  void abort() { socket_.shutdownBoth(); }

 private:
  Socket socket_;
  int peer_;
  bool unix_;
  std::unique_ptr<shm::Channel> channel_;
};

}  // namespace cumulus::comm::tcp
