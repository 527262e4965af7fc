#include "base/bind_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace cumulus::base {
namespace {

TEST(BindAddress, LoopbackRouteUsesLoopbackSource) {
  EXPECT_EQ(routeSourceAddress("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(routeSourceAddress("127.0.0.53"), "127.0.0.1");
  EXPECT_EQ(routeSourceAddress("localhost").rfind("127.", 0) == 0 ||
                routeSourceAddress("localhost") == "::1",
            true);
}

TEST(BindAddress, UnresolvableHostIsNamedWithTheFix) {
  try {
    routeSourceAddress("no-such-host.invalid");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no-such-host.invalid"), std::string::npos) << what;
    EXPECT_NE(what.find("--bind-host"), std::string::npos) << what;
  }
}

TEST(PickFreePort, ThePortCanBeBoundAndDiffersWhileHeld) {
  const int port = pickFreePort();
  ASSERT_GE(port, 1);
  ASSERT_LE(port, 65535);
  // Nothing holds it: a listener binds it (as rank 0's store will).
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_ANY);
  at.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 1), 0);
  // While it is held, the next pick is another port.
  EXPECT_NE(pickFreePort(), port);
  ::close(fd);
}

}  // namespace
}  // namespace cumulus::base
