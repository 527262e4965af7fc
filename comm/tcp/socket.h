#pragma once
// A stream socket (TCP, or AF_UNIX in the abstract namespace; see comm/transport.h) that owns its
// file descriptor (RAII, move-only), always in non-blocking mode. Every operation that can wait
// takes an absolute deadline and waits with poll(), so nothing here can block forever. Failures are
// reported as an IoStatus, not thrown: only the caller knows which operation, sequence number and
// peer to name in the CommError.
//
// Thread-safety: a Socket is used by one thread at a time.

#include <chrono>
#include <cstddef>
#include <string>

namespace cumulus::comm::tcp {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Milliseconds until `deadline` for poll(): 0 when past, rounded up otherwise.
int pollTimeoutMs(Deadline deadline);

struct IoStatus {
  enum Code { kOk, kTimeout, kClosed } code = kOk;
  std::string detail;  // errno text or what was happening
  bool ok() const { return code == kOk; }
};

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
  // Throws std::runtime_error naming the host on failure.
  static Socket listen(const std::string& host);
  // Connects to "host:port" ("[v6]:port" for IPv6), retrying refused connections until the
  // deadline (the listener may not be up yet). Returns an invalid Socket and fills `status` on
  // failure.
  static Socket connect(const std::string& address, Deadline deadline, IoStatus* status);
  // Listens on the abstract AF_UNIX name "\0<name>" (no file, nothing to clean up: the name
  // vanishes with the socket). Throws std::runtime_error naming it (e.g. already taken).
  static Socket listenUnix(const std::string& name);
  // Connects to the abstract AF_UNIX name. No retry: the peer listens before it publishes the
  // name, so a refusal means it is unreachable (another network namespace) or gone.
  static Socket connectUnix(const std::string& name, IoStatus* status);
  // Accepts one connection; an invalid Socket and kTimeout if none arrives before the deadline.
  Socket accept(Deadline deadline, IoStatus* status);

  // The bound address as "host:port" (host as numeric address), or "unix:@name".
  std::string localAddress() const;

  // True for an AF_UNIX socket.
  bool isUnix() const;

  // TCP_NODELAY (TCP only) and, when bufferBytes > 0, SO_SNDBUF/SO_RCVBUF (0 keeps kernel
  // autotuning).
  void tune(int bufferBytes);

  // Blocking-with-deadline transfers of exactly `bytes` bytes (used by the handshake).
  IoStatus readFull(void* data, size_t bytes, Deadline deadline);
  IoStatus writeFull(const void* data, size_t bytes, Deadline deadline);

  // Stops both directions now; the peer sees EOF / reset at once. The fd stays owned.
  void shutdownBoth();
  void close();

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace cumulus::comm::tcp
