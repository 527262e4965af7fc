// The data plane's socket (comm/tcp/socket.h): listening, connecting and accepting with a
// deadline, and full reads and writes, each failure a Status with its kind and exact text.
#include <gtest/gtest.h>

#include "base/host_port.h"
#include "comm/tcp/socket.h"

namespace cumulus::comm::tcp {
namespace {

TEST(Socket, ListenPublishesANumericLoopbackAddress) {
  Socket listener = Socket::listen("127.0.0.1");
  const auto endpoint = base::parseHostPort(listener.localAddress());
  ASSERT_TRUE(endpoint) << listener.localAddress();
  EXPECT_EQ(endpoint->host, "127.0.0.1");
  EXPECT_GT(endpoint->port, 0);
  EXPECT_THROW(Socket::listen("no-such-host.invalid"), std::runtime_error);
}

}  // namespace
}  // namespace cumulus::comm::tcp
