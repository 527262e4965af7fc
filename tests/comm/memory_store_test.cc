#include "comm/memory_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/error.h"
#include "tests/wait_until.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;

TEST(MemoryStore, SetGetTryGetRemove) {
  MemoryStore store;
  EXPECT_FALSE(store.tryGet("a").has_value());
  store.set("a", std::string("x\0y", 3));
  EXPECT_EQ(store.get("a", 10ms), std::string("x\0y", 3));
  EXPECT_TRUE(store.remove("a"));
  EXPECT_FALSE(store.remove("a"));
}

TEST(MemoryStore, GetBlocksUntilSetFromAnotherThread) {
  MemoryStore store;
  std::thread writer([&] {
    // Set the key only once the reader waits for it (bounded: a reader that never blocks fails
    // the test below rather than hanging it).
    cumulus::testing::waitUntil([&] { return store.blockedCalls() > 0; }, 5s);
    store.set("late", "v");
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(store.get("late", 5000ms), "v");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  writer.join();
  EXPECT_EQ(store.blockedCalls(), 0);
}

TEST(MemoryStore, WaitTimesOutNamingMissingKeys) {
  MemoryStore store;
  store.set("present", "1");
  const auto start = std::chrono::steady_clock::now();
  try {
    store.wait({"present", "gen/1/addr/3"}, 50ms);
    FAIL() << "wait should time out";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_NE(std::string(e.what()).find("'gen/1/addr/3'"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("'present'"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST(MemoryStore, AddIsAtomicAcrossThreads) {
  MemoryStore store;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) store.add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.add("counter", 0), 4000);
  EXPECT_EQ(store.add("counter", -4001), -1);
  store.set("text", "abc");
  EXPECT_THROW(store.add("text", 1), CommError);
}

TEST(MemoryStore, CompareSetAndRemovePrefix) {
  MemoryStore store;
  EXPECT_EQ(store.compareSet("k", "", "first"), "first");        // missing matches empty
  EXPECT_EQ(store.compareSet("k", "wrong", "second"), "first");  // no change
  EXPECT_EQ(store.compareSet("k", "first", "second"), "second");
  store.set("gen/1/addr/0", "a");
  store.set("gen/1/addr/1", "b");
  store.set("gen/10/addr/0", "c");
  store.set("gen/2/addr/0", "d");
  EXPECT_EQ(store.removePrefix("gen/1/"), 2);
  EXPECT_TRUE(store.tryGet("gen/10/addr/0").has_value());
  EXPECT_TRUE(store.tryGet("gen/2/addr/0").has_value());
}

}  // namespace
}  // namespace cumulus::comm
