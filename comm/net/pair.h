#pragma once
// Pair: the established, authenticated connection to one peer rank (Gloo's term). It owns the
// stream socket, TCP or (between ranks on one host) AF_UNIX, and, where both ranks agreed on it,
// the shared-memory channel that carries large payloads (comm/shm/channel.h); the transfer engine
// (transfer.h) drives both with non-blocking I/O. comm/net/ is everything on a socket: the
// sockets, the frames, the handshake, the pairs and the transfers.
//
// Thread-safety: used by one thread at a time (the communicator's executing thread), except
// abort(), which any thread may call to make a pending transfer fail at once.

#include <memory>
#include <utility>

#include "comm/net/socket.h"
#include "comm/shm/channel.h"

namespace cumulus::comm::net {

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

}  // namespace cumulus::comm::net
