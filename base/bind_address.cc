#include "base/bind_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace cumulus::base {

std::string routeSourceAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    throw std::runtime_error("cannot resolve the rendezvous host " + host + ": " +
                             ::gai_strerror(rc) + " (name this node's address with --bind-host)");
  }
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // A UDP connect() only picks the route and the source address; nothing goes on the wire.
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    ::close(fd);
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    ::inet_ntop(local.ss_family, raw, text, sizeof text);
    ::freeaddrinfo(found);
    return text;
  }
  ::freeaddrinfo(found);
  throw std::runtime_error("no route to the rendezvous host " + host + ": " + error +
                           " (name this node's address with --bind-host)");
}

int pickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot bind a TCP port: " + error);
  }
  ::close(fd);
  return ntohs(bound.sin_port);
}

}  // namespace cumulus::base
