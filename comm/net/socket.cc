#include "comm/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "base/connect.h"
#include "base/host_port.h"

namespace cumulus::comm::net {
namespace {

void setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

std::string errnoText(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

// Waits until `fd` is ready for `events` or the deadline passes. Returns false on timeout.
bool waitFor(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, pollTimeoutMs(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the following syscall report the error
  }
}

}  // namespace

int pollTimeoutMs(Deadline deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > 1000000 ? 1000000 : static_cast<int>(ms);
}

Socket::~Socket() { close(); }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdownBoth() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Socket Socket::listen(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "0", &hints, &result);
  if (rc != 0) {
    throw CommError(ErrorKind::kInvalid, "rendezvous", 0, -1,
                    "cannot resolve data-plane bind host '" + host + "': " + gai_strerror(rc));
  }
  std::string lastError = "no address";
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    Socket sock(fd);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      setNonBlocking(fd);
      ::freeaddrinfo(result);
      return sock;
    }
    lastError = errnoText("bind/listen", errno);
  }
  ::freeaddrinfo(result);
  throw CommError(ErrorKind::kInvalid, "rendezvous", 0, -1,
                  "cannot listen on data-plane host '" + host + "': " + lastError +
                      " (name a local address in the communicator's bind host)");
}

namespace {

// Fills an abstract-namespace address for `name`; returns its length, 0 if the name is too long.
socklen_t unixAddress(const std::string& name, sockaddr_un* addr) {
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof addr->sun_path) return 0;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());  // sun_path[0] = '\0': abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

}  // namespace

Socket Socket::listenUnix(const std::string& name) {
  sockaddr_un addr;
  socklen_t len = unixAddress(name, &addr);
  auto fail = [](const std::string& detail) {
    throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, -1, detail);
  };
  if (len == 0) fail("AF_UNIX name '" + name + "' is empty or too long");
  Socket sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) fail(errnoText("AF_UNIX socket", errno));
  if (::bind(sock.fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(sock.fd(), 128) != 0) {
    fail(errnoText(("cannot listen on AF_UNIX name @" + name).c_str(), errno));
  }
  setNonBlocking(sock.fd());
  return sock;
}

Result<Socket> Socket::connectUnix(const std::string& name) {
  sockaddr_un addr;
  socklen_t len = unixAddress(name, &addr);
  if (len == 0) return Status(ErrorKind::kInvalid, "malformed AF_UNIX name '" + name + "'");
  Socket sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) return Status(ErrorKind::kRendezvous, errnoText("AF_UNIX socket", errno));
  // A non-blocking AF_UNIX connect completes at once or fails with EAGAIN when the listener's
  // backlog is full; retry that briefly rather than fail the rendezvous.
  for (int attempt = 0;; ++attempt) {
    if (::connect(sock.fd(), reinterpret_cast<sockaddr*>(&addr), len) == 0) break;
    if ((errno == EAGAIN || errno == EINTR) && attempt < 1000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    return Status(ErrorKind::kPeerClosed, errnoText(("connect to unix:@" + name).c_str(), errno));
  }
  return sock;
}

bool Socket::isUnix() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  return ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
         addr.ss_family == AF_UNIX;
}

Result<Socket> Socket::connect(const std::string& address, Deadline deadline) {
  const std::optional<base::HostPort> endpoint = base::parseHostPort(address);
  if (!endpoint) return Status(ErrorKind::kInvalid, "malformed address '" + address + "'");
  const std::string& host = endpoint->host;
  const int port = endpoint->port;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (rc != 0) {
    return Status(ErrorKind::kRendezvous, "cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::string lastError;
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
      base::Connected attempt = base::connectBefore(ai->ai_addr, ai->ai_addrlen, deadline);
      if (attempt.error == 0) {
        ::freeaddrinfo(result);
        return Socket(attempt.fd.release());
      }
      if (attempt.error == ETIMEDOUT) {
        ::freeaddrinfo(result);
        return Status(ErrorKind::kTimeout, "connect to " + address + " timed out");
      }
      lastError = errnoText(("connect to " + address).c_str(), attempt.error);
    }
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  ::freeaddrinfo(result);
  return Status(ErrorKind::kTimeout, lastError + " (retried until the deadline)");
}

Result<Socket> Socket::accept(Deadline deadline) {
  for (;;) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return Socket(fd);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status(ErrorKind::kRendezvous, errnoText("accept", errno));
    }
    if (!waitFor(fd_, POLLIN, deadline)) {
      return Status(ErrorKind::kTimeout, "no connection arrived before the deadline");
    }
  }
}

std::string Socket::localAddress() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (addr.ss_family == AF_UNIX) {
    auto* a = reinterpret_cast<sockaddr_un*>(&addr);
    size_t n =
        len > offsetof(sockaddr_un, sun_path) + 1 ? len - offsetof(sockaddr_un, sun_path) - 1 : 0;
    return "unix:@" + std::string(a->sun_path + 1, n);
  }
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&addr);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  port = ntohs(a->sin_port);
  return std::string(host) + ":" + std::to_string(port);
}

void Socket::tune(int bufferBytes) {
  int one = 1;
  if (!isUnix()) ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (bufferBytes > 0) {
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bufferBytes, sizeof bufferBytes);
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bufferBytes, sizeof bufferBytes);
  }
}

Status Socket::readFull(void* data, size_t bytes, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::recv(fd_, p + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status(ErrorKind::kPeerClosed, "connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Status(ErrorKind::kPeerClosed, errnoText("recv", errno));
    if (!waitFor(fd_, POLLIN, deadline)) {
      return Status(ErrorKind::kTimeout, "received " + std::to_string(done) + " of " +
                                             std::to_string(bytes) + " bytes before the deadline");
    }
  }
  return {};
}

Status Socket::writeFull(const void* data, size_t bytes, Deadline deadline) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::send(fd_, p + done, bytes - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Status(ErrorKind::kPeerClosed, errnoText("send", errno));
    if (!waitFor(fd_, POLLOUT, deadline)) {
      return Status(ErrorKind::kTimeout, "sent " + std::to_string(done) + " of " +
                                             std::to_string(bytes) + " bytes before the deadline");
    }
  }
  return {};
}

}  // namespace cumulus::comm::net
