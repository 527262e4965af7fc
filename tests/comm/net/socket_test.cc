// The data plane's socket (comm/net/socket.h): listening, connecting and accepting with a
// deadline, and full reads and writes, each failure a Status with its kind and exact text.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "base/host_port.h"
#include "comm/net/socket.h"
#include "tests/comm/socket_pair.h"

namespace cumulus::comm::net {
namespace {

using namespace std::chrono_literals;
using comm::testing::socketPair;

TEST(Socket, ListenPublishesANumericLoopbackAddress) {
  Socket listener = Socket::listen("127.0.0.1");
  const auto endpoint = base::parseHostPort(listener.localAddress());
  ASSERT_TRUE(endpoint) << listener.localAddress();
  EXPECT_EQ(endpoint->host, "127.0.0.1");
  EXPECT_GT(endpoint->port, 0);
  EXPECT_THROW(Socket::listen("no-such-host.invalid"), std::runtime_error);
}

TEST(Socket, ListenOnAHostThatDoesNotResolveNamesIt) {
  try {
    Socket::listen("no-such-host.invalid");
    FAIL() << "listened on no-such-host.invalid";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_EQ(e.op(), "rendezvous");
    const std::string prefix =
        "rendezvous seq 0: invalid: cannot resolve data-plane bind host 'no-such-host.invalid': ";
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
  }
}

TEST(Socket, ConnectAndAcceptFailWithTheirKindAndText) {
  Result<Socket> malformed = Socket::connect("nonsense", Clock::now() + 1s);
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.status().kind(), ErrorKind::kInvalid);
  EXPECT_EQ(malformed.status().detail(), "malformed address 'nonsense'");

  Result<Socket> unnamed = Socket::connectUnix("");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().kind(), ErrorKind::kInvalid);
  EXPECT_EQ(unnamed.status().detail(), "malformed AF_UNIX name ''");

  Socket listener = Socket::listen("127.0.0.1");
  Result<Socket> none = listener.accept(Clock::now());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().kind(), ErrorKind::kTimeout);
  EXPECT_EQ(none.status().detail(), "no connection arrived before the deadline");

  // A port nobody listens on (ours, closed): refused until the deadline.
  const std::string address = listener.localAddress();
  listener.close();
  Result<Socket> refused = Socket::connect(address, Clock::now() + 50ms);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().kind(), ErrorKind::kTimeout);
  EXPECT_EQ(refused.status().detail(),
            "connect to " + address + ": Connection refused (retried until the deadline)");
}

TEST(Socket, ConnectedEndsMoveBytesBothWays) {
  Socket listener = Socket::listen("127.0.0.1");
  Result<Socket> client = Socket::connect(listener.localAddress(), Clock::now() + 5s);
  ASSERT_TRUE(client.ok()) << client.status().detail();
  Result<Socket> server = listener.accept(Clock::now() + 5s);
  ASSERT_TRUE(server.ok()) << server.status().detail();
  const char hello[] = "hello";
  ASSERT_TRUE(client.value().writeFull(hello, sizeof hello, Clock::now() + 5s).ok());
  char got[sizeof hello] = {};
  ASSERT_TRUE(server.value().readFull(got, sizeof got, Clock::now() + 5s).ok());
  EXPECT_STREQ(got, "hello");
}

TEST(Socket, FullReadsSayHowFarTheyGot) {
  auto wire = socketPair();
  Socket& reader = wire.first;
  Socket& writer = wire.second;
  ASSERT_TRUE(writer.writeFull("abc", 3, Clock::now() + 5s).ok());
  char buffer[8];
  const Status late = reader.readFull(buffer, sizeof buffer, Clock::now() + 50ms);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.kind(), ErrorKind::kTimeout);
  EXPECT_EQ(late.detail(), "received 3 of 8 bytes before the deadline");
  writer.close();
  const Status closed = reader.readFull(buffer, sizeof buffer, Clock::now() + 5s);
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.kind(), ErrorKind::kPeerClosed);
  EXPECT_EQ(closed.detail(), "connection closed by the peer");
}

}  // namespace
}  // namespace cumulus::comm::net
