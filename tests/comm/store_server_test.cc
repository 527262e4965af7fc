// Store semantics through a real StoreServer and StoreClient on loopback.

#include "comm/store_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "comm/store_client.h"
#include "comm/store_service.h"
#include "tests/comm/rpc_test_util.h"

namespace cumulus::comm {
namespace {

using rpctest::commErrorOf;
using rpctest::seconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kStoreToken[] = "s3cret-token";

class StoreServerTest : public ::testing::Test {
 protected:
  StoreServer server_{"", 0, kStoreToken};
  StoreClient client_{"127.0.0.1", server_.port(), kStoreToken};
};

TEST_F(StoreServerTest, BindsLoopbackOnAnEphemeralPort) {
  EXPECT_EQ(server_.host(), "127.0.0.1");
  EXPECT_GT(server_.port(), 0);
  EXPECT_EQ(client_.endpoint(), "127.0.0.1:" + std::to_string(server_.port()));
}

TEST_F(StoreServerTest, SetThenGetReturnsTheBytes) {
  const Bytes binary("a\0b\xff", 4);
  client_.set("gen/0/addr/1", binary);
  EXPECT_EQ(client_.get("gen/0/addr/1", 1s), binary);
  client_.set("gen/0/addr/1", "overwritten");
  EXPECT_EQ(client_.get("gen/0/addr/1", 1s), "overwritten");
  EXPECT_EQ(client_.tryGet("gen/0/addr/1"), std::optional<Bytes>("overwritten"));
  EXPECT_EQ(client_.tryGet("gen/0/addr/2"), std::nullopt);
}

TEST_F(StoreServerTest, GetBlocksUntilAnotherClientSets) {
  StoreClient other("127.0.0.1", server_.port(), kStoreToken);
  std::thread setter([&] {
    // Set the key only once the server blocks on the reader's behalf.
    EXPECT_TRUE(rpctest::waitUntil([&] { return server_.blockedCalls() == 1; }));
    other.set("late", "here");
  });
  EXPECT_EQ(client_.get("late", 5s), "here");
  setter.join();
  EXPECT_EQ(server_.blockedCalls(), 0);
}

TEST_F(StoreServerTest, GetTimeoutNamesTheKey) {
  const auto start = Clock::now();
  try {
    client_.get("gen/3/addr/7", 200ms);
    FAIL() << "get of a missing key returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_EQ(e.op(), "store.get");
    EXPECT_THAT(e.what(), HasSubstr("key 'gen/3/addr/7' still missing after 0."));
    EXPECT_THAT(e.what(), HasSubstr("on store 127.0.0.1:" + std::to_string(server_.port())));
  }
  const double took = seconds(Clock::now() - start);
  EXPECT_GE(took, 0.19);
  EXPECT_LT(took, 1.5);
}

TEST_F(StoreServerTest, ConcurrentAddsSumExactly) {
  constexpr int kThreads = 8, kAdds = 200;
  auto errors = rpctest::runRanks(kThreads, [&](int rank) {
    StoreClient mine("127.0.0.1", server_.port(), kStoreToken);
    for (int i = 0; i < kAdds; ++i) mine.add("counter", rank + 1);
  });
  rpctest::expectNoErrors(errors);
  // Σ_{r=1..8} r · 200 = 7200
  EXPECT_EQ(client_.add("counter", 0), 7200);
  EXPECT_EQ(client_.get("counter", 1s), "7200");
  EXPECT_EQ(client_.add("fresh", -5), -5);
}

TEST_F(StoreServerTest, AddOnANonIntegerValueIsInvalid) {
  client_.set("text", "abc");
  try {
    client_.add("text", 1);
    FAIL() << "add on a non-integer returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_THAT(e.what(), HasSubstr("key 'text' holds a non-integer value"));
  }
  EXPECT_EQ(client_.get("text", 1s), "abc");
}

// Found by tests/fuzz/store_fuzz.cc: the sum overflowed int64 (undefined behaviour).
TEST_F(StoreServerTest, AddThatWouldOverflowIsInvalidAndKeepsTheValue) {
  EXPECT_EQ(client_.add("n", INT64_MAX), INT64_MAX);
  try {
    client_.add("n", 1);
    FAIL() << "an overflowing add returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_THAT(e.what(), HasSubstr("adding 1 to key 'n' overflows a 64-bit integer"));
  }
  EXPECT_EQ(client_.get("n", 1s), "9223372036854775807");
}

// Found by tests/fuzz/store_fuzz.cc: a wait_ms near 2^63 overflowed the clock arithmetic
// (undefined behaviour) before the handler looked at the key. Called in-process, as no client
// asks for such a wait.
TEST(StoreServiceTest, AnAstronomicalWaitOnAPresentKeyAnswersAtOnce) {
  std::unique_ptr<proto::Store::Service> store = makeStoreService("");
  grpc::ServerContext set_context, get_context;
  proto::SetRequest set;
  proto::SetResponse set_response;
  set.set_key("k");
  set.set_value("v");
  ASSERT_TRUE(store->Set(&set_context, &set, &set_response).ok());
  proto::GetRequest get;
  proto::GetResponse got;
  get.set_key("k");
  get.set_wait_ms(INT64_MAX);
  ASSERT_TRUE(store->Get(&get_context, &get, &got).ok());
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.value(), "v");
}

TEST_F(StoreServerTest, CompareSetSwapsOnlyOnAMatch) {
  EXPECT_EQ(client_.compareSet("leader", "", "rank0"), "rank0");  // missing matches ""
  EXPECT_EQ(client_.compareSet("leader", "", "rank1"), "rank0");  // exists now: no swap
  EXPECT_EQ(client_.compareSet("leader", "rank9", "rank2"), "rank0");
  EXPECT_EQ(client_.compareSet("leader", "rank0", "rank3"), "rank3");
  EXPECT_EQ(client_.get("leader", 1s), "rank3");
  EXPECT_EQ(client_.compareSet("absent", "x", "y"), "");  // missing, expected not empty
  EXPECT_EQ(client_.tryGet("absent"), std::nullopt);
}

TEST_F(StoreServerTest, WaitReturnsOnceEveryKeyExists) {
  std::thread setter([&] {
    StoreClient other("127.0.0.1", server_.port(), kStoreToken);
    // One key at a time, each while the wait blocks for the rest.
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(rpctest::waitUntil([&] { return server_.blockedCalls() == 1; }));
      other.set("gen/1/addr/" + std::to_string(r), "host:" + std::to_string(r));
    }
  });
  client_.wait({"gen/1/addr/0", "gen/1/addr/1", "gen/1/addr/2", "gen/1/addr/3"}, 5s);
  EXPECT_EQ(client_.get("gen/1/addr/3", 0ms), "host:3");
  setter.join();
}

TEST_F(StoreServerTest, WaitTimeoutNamesTheMissingKeys) {
  client_.set("gen/2/addr/0", "a");
  client_.set("gen/2/addr/2", "c");
  try {
    client_.wait({"gen/2/addr/0", "gen/2/addr/1", "gen/2/addr/2", "gen/2/addr/3"}, 200ms);
    FAIL() << "wait returned with keys missing";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_EQ(e.op(), "store.wait");
    EXPECT_THAT(e.what(), HasSubstr("2 of 4 keys still missing after 0."));
    EXPECT_THAT(e.what(), HasSubstr(": 'gen/2/addr/1', 'gen/2/addr/3'"));
  }
}

TEST_F(StoreServerTest, RemoveAndRemovePrefixDropAStaleGeneration) {
  for (int r = 0; r < 3; ++r) {
    client_.set("gen/1/addr/" + std::to_string(r), "old");
    client_.set("gen/2/addr/" + std::to_string(r), "new");
  }
  client_.set("gen/10/addr/0", "other generation sharing the digit");
  EXPECT_TRUE(client_.remove("gen/2/addr/2"));
  EXPECT_FALSE(client_.remove("gen/2/addr/2"));
  EXPECT_EQ(client_.removePrefix("gen/1/"), 3);
  EXPECT_EQ(client_.removePrefix("gen/1/"), 0);
  EXPECT_EQ(client_.tryGet("gen/1/addr/0"), std::nullopt);
  EXPECT_EQ(client_.tryGet("gen/10/addr/0"),
            std::optional<Bytes>("other generation sharing the digit"));
  EXPECT_EQ(client_.tryGet("gen/2/addr/1"), std::optional<Bytes>("new"));
}

TEST_F(StoreServerTest, OversizedValueIsRejectedBeforeSending) {
  const Bytes big(StoreServer::kMaxValueBytes + 1, 'x');
  try {
    client_.set("big", big);
    FAIL() << "set of an oversized value returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_THAT(e.what(), HasSubstr("value for key 'big' is 4194305 bytes"));
  }
  const Bytes largest(StoreServer::kMaxValueBytes, 'y');
  client_.set("largest", largest);
  EXPECT_EQ(client_.get("largest", 1s), largest);
}

TEST_F(StoreServerTest, ATakenPortIsAnErrorNamingIt) {
  try {
    StoreServer second("", server_.port(), kStoreToken);
    FAIL() << "a second server bound the same port";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("cannot listen on 127.0.0.1:" + std::to_string(server_.port())));
  }
}

}  // namespace
}  // namespace cumulus::comm
