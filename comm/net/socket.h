#pragma once
// A stream socket (TCP, or AF_UNIX in the abstract namespace; see comm/transport.h) that owns its
// file descriptor (RAII, move-only), always in non-blocking mode. Every operation that can wait
// takes an absolute deadline and waits with poll(), so nothing here can block forever.
//
// Failures follow comm/error.h: connecting, accepting and the full reads/writes return a Status or
// a Result (kTimeout when the deadline passed, kPeerClosed when the connection closed or reset,
// kRendezvous / kInvalid when there is nothing to connect to), because only the caller knows
// which operation, sequence number and peer to name in the CommError. Setting up a listener is
// the rendezvous's own first step and throws CommError(op "rendezvous", seq 0, peer -1).
//
// Thread-safety: a Socket is used by one thread at a time.

#include <chrono>
#include <cstddef>
#include <string>

#include "comm/error.h"

namespace cumulus::comm::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Milliseconds until `deadline` for poll(): 0 when past, rounded up otherwise.
int pollTimeoutMs(Deadline deadline);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Binds `host` (a name or address) on an ephemeral port and listens.
  // Throws CommError kInvalid naming the host when it does not resolve or cannot be bound.
  static Socket listen(const std::string& host);
  // Connects to "host:port" ("[v6]:port" for IPv6), retrying refused connections until the
  // deadline (the listener may not be up yet). Fails with kInvalid (malformed address),
  // kRendezvous (the host does not resolve) or kTimeout (refused or silent until the deadline).
  static Result<Socket> connect(const std::string& address, Deadline deadline);
  // Listens on the abstract AF_UNIX name "\0<name>" (no file, nothing to clean up: the name
  // vanishes with the socket). Throws CommError kRendezvous naming it (e.g. already taken).
  static Socket listenUnix(const std::string& name);
  // Connects to the abstract AF_UNIX name. No retry: the peer listens before it publishes the
  // name, so a refusal (kPeerClosed) means it is unreachable (another network namespace) or gone.
  static Result<Socket> connectUnix(const std::string& name);
  // Accepts one connection; kTimeout if none arrives before the deadline.
  Result<Socket> accept(Deadline deadline);

  // The bound address as "host:port" (host as numeric address), or "unix:@name".
  std::string localAddress() const;

  // True for an AF_UNIX socket.
  bool isUnix() const;

  // TCP_NODELAY (TCP only) and, when bufferBytes > 0, SO_SNDBUF/SO_RCVBUF (0 keeps kernel
  // autotuning).
  void tune(int bufferBytes);

  // Blocking-with-deadline transfers of exactly `bytes` bytes (used by the handshake): kTimeout
  // or kPeerClosed, the detail saying how far it got.
  Status readFull(void* data, size_t bytes, Deadline deadline);
  Status writeFull(const void* data, size_t bytes, Deadline deadline);

  // Stops both directions now; the peer sees EOF / reset at once. The fd stays owned.
  void shutdownBoth();
  void close();

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace cumulus::comm::net
