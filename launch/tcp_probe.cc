#include "launch/tcp_probe.h"

#include <netdb.h>
#include <sys/socket.h>

#include <thread>

#include "base/connect.h"

namespace cumulus::launch {
namespace {

bool tcpConnects(const std::string& host, int port,
                 std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool ok = false;
  for (addrinfo* ai = found; ai != nullptr && !ok; ai = ai->ai_next) {
    // A host that drops SYNs must not hold this past the deadline (a blocking connect would
    // wait for the kernel's own timeout, minutes).
    ok = base::connectBefore(ai->ai_addr, ai->ai_addrlen, deadline).error == 0;
  }
  ::freeaddrinfo(found);
  return ok;
}

}  // namespace

bool waitUntilListening(const std::string& host, int port, std::chrono::milliseconds timeout,
                        bool (*interrupted)()) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (tcpConnects(host, port, deadline)) return true;
    if (std::chrono::steady_clock::now() >= deadline || (interrupted && interrupted()))
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace cumulus::launch
