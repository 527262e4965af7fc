// StoreClient failure paths: tokens, unreachable endpoints, a server that goes away.

#include "comm/store_client.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "comm/store_server.h"
#include "proto/store.grpc.pb.h"
#include "tests/comm/rpc_test_util.h"

namespace cumulus::comm {
namespace {

using rpctest::seconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(StoreClientTest, WrongTokenIsUnauthorizedAndWritesNothing) {
  StoreServer server("", 0, "right");
  StoreClient intruder("127.0.0.1", server.port(), "wrong");
  StoreClient owner("127.0.0.1", server.port(), "right");
  try {
    intruder.set("gen/0/addr/0", "evil");
    FAIL() << "set with a wrong token returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnauthorized);
    EXPECT_THAT(e.what(), HasSubstr("wrong job token (x-cumulus-token)"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("right")));  // never leaks the token
  }
  EXPECT_THROW(intruder.add("n", 1), CommError);
  EXPECT_THROW(intruder.removePrefix("gen/"), CommError);
  owner.set("kept", "v");
  EXPECT_THROW(intruder.remove("kept"), CommError);
  EXPECT_EQ(owner.tryGet("gen/0/addr/0"), std::nullopt);
  EXPECT_EQ(owner.tryGet("n"), std::nullopt);
  EXPECT_EQ(owner.tryGet("kept"), std::optional<Bytes>("v"));
}

TEST(StoreClientTest, MissingTokenIsUnauthorized) {
  StoreServer server("", 0, "right");
  StoreClient anonymous("127.0.0.1", server.port(), "");
  try {
    anonymous.tryGet("k");
    FAIL() << "a call without a token returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnauthorized);
    EXPECT_THAT(e.what(), HasSubstr("missing job token"));
  }
}

TEST(StoreClientTest, TokenPrefixIsNotEnough) {
  StoreServer server("", 0, "abcdef");
  StoreClient prefix("127.0.0.1", server.port(), "abc");
  StoreClient longer("127.0.0.1", server.port(), "abcdefg");
  EXPECT_THROW(prefix.set("k", "v"), CommError);
  EXPECT_THROW(longer.set("k", "v"), CommError);
}

TEST(StoreClientTest, UnreachableEndpointErrorNamesItAndHowLongItWasTried) {
  int port;
  {
    StoreServer gone("", 0, "t");
    port = gone.port();
  }  // the port is closed now: connections are refused
  StoreClientOptions options;
  options.connect_timeout = 600ms;
  StoreClient client("127.0.0.1", port, "t", options);
  const auto start = Clock::now();
  try {
    client.set("k", "v");
    FAIL() << "set against a closed port returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kStore);
    EXPECT_EQ(e.peer(), -1);
    EXPECT_THAT(e.what(), HasSubstr("store 127.0.0.1:" + std::to_string(port) +
                                    " unreachable for 0.6 s (connection refused)"));
  }
  const double took = seconds(Clock::now() - start);
  EXPECT_GE(took, 0.55);
  EXPECT_LT(took, 2.0);
}

TEST(StoreClientTest, ServerShutdownDuringABlockingWaitFailsFast) {
  auto server = std::make_unique<StoreServer>("", 0, "t");
  StoreClient client("127.0.0.1", server->port(), "t");
  std::thread stopper([&] {
    EXPECT_TRUE(rpctest::waitUntil([&] { return server->blockedCalls() == 1; }));
    server->shutdown();
  });
  const auto start = Clock::now();
  try {
    client.wait({"never"}, 20s);
    FAIL() << "wait returned although the key never appeared";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kStore);
    EXPECT_THAT(e.what(), HasSubstr("store server shutting down"));
  }
  EXPECT_LT(seconds(Clock::now() - start), 3.0);
  stopper.join();
  // After shutdown, blocking gets fail as unreachable rather than hanging.
  StoreClientOptions quick;
  quick.connect_timeout = 300ms;
  StoreClient late("127.0.0.1", server->port(), "t", quick);
  EXPECT_THROW(late.get("never", 10s), CommError);
}

TEST(StoreClientTest, ShutdownWakesEveryBlockedGet) {
  StoreServer server("", 0, "t");
  std::thread stopper([&] {
    EXPECT_TRUE(rpctest::waitUntil([&] { return server.blockedCalls() == 6; }));
    server.shutdown();
  });
  const auto start = Clock::now();
  auto errors = rpctest::runRanks(6, [&](int) {
    StoreClient client("127.0.0.1", server.port(), "t");
    client.get("never", 20s);
  });
  EXPECT_LT(seconds(Clock::now() - start), 3.0);
  stopper.join();
  for (const auto& error : errors) EXPECT_EQ(rpctest::commErrorOf(error).kind(), ErrorKind::kStore);
}

// A client that gives up (deadline) while the server blocks on its behalf must not leave a
// handler behind: shutdown() would then wait for it.
TEST(StoreClientTest, ServerSideWaitEndsAtTheClientsDeadline) {
  StoreServer server("", 0, "t");
  auto stub = proto::Store::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata("x-cumulus-token", "t");
  context.set_deadline(std::chrono::system_clock::now() + 200ms);
  proto::WaitRequest request;
  request.add_keys("never");
  request.set_wait_ms(60000);  // far beyond the deadline
  proto::WaitResponse response;
  const auto start = Clock::now();
  const grpc::Status status = stub->Wait(&context, request, &response);
  // The server stops at the deadline too, so its "still missing" answer may win the race.
  if (status.ok()) {
    ASSERT_EQ(response.missing_size(), 1);
    EXPECT_EQ(response.missing(0), "never");
  } else {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  EXPECT_LT(seconds(Clock::now() - start), 1.5);
  // The handler notices the expired deadline within its poll interval, without any shutdown.
  EXPECT_TRUE(rpctest::waitUntil([&] { return server.blockedCalls() == 0; }, 2s));
  EXPECT_LT(seconds(Clock::now() - start), 0.8);
}

TEST(StoreClientTest, BlockedCallsCountsWaitingHandlers) {
  StoreServer server("", 0, "t");
  StoreClient client("127.0.0.1", server.port(), "t");
  std::thread waiter([&] { client.get("soon", 5s); });
  EXPECT_TRUE(rpctest::waitUntil([&] { return server.blockedCalls() == 1; }, 2s));
  client.set("soon", "v");
  waiter.join();
  EXPECT_EQ(server.blockedCalls(), 0);
}

}  // namespace
}  // namespace cumulus::comm
