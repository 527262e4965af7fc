// Goodput (metrics/goodput.h): the split of a run's wall time, across launches; and the
// StorePublisher (metrics/store_publisher.h) that sends records and statuses to node 0.
#include "metrics/goodput.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "comm/memory_store.h"
#include "comm/store_keys.h"
#include "cumulus/errors.h"
#include "metrics/store_publisher.h"
#include "tests/test_dir.h"

namespace cumulus::metrics {
namespace {

TEST(GoodputAccountTest, SplitsOneLaunchsWallTime) {
  GoodputAccount account(100.0);
  account.firstStep(101.5);
  for (int i = 0; i < 4; ++i) account.step(0.5, 0.125);
  account.evaluation(0.25);
  account.checkpointStall(0.125);
  account.reform(2.0);
  const GoodputSplit split = account.at(110.0);
  EXPECT_EQ(split.wall_s, 10.0);
  EXPECT_EQ(split.startup_s, 1.5);
  EXPECT_EQ(split.training_s, 1.5);
  EXPECT_EQ(split.comm_wait_s, 0.5);
  EXPECT_EQ(split.evaluation_s, 0.25);
  EXPECT_EQ(split.checkpoint_s, 0.125);
  EXPECT_EQ(split.reform_s, 2.0);
  EXPECT_EQ(split.restart_s, 0.0);
  EXPECT_EQ(split.redone_s, 0.0);
  EXPECT_EQ(split.other_s, 10.0 - 1.5 - 1.5 - 0.5 - 0.25 - 0.125 - 2.0);
  EXPECT_EQ(split.productiveRatio(), 0.2);
  const nlohmann::ordered_json json = split.toJson();
  EXPECT_EQ(json.begin().key(), "wall_s");
  EXPECT_EQ(json["productive_ratio"], 0.2);
  EXPECT_EQ(GoodputSplit::fromJson(nlohmann::json::parse(json.dump())).other_s, split.other_s);
}

// A launch that resumes from step 40's checkpoint, whose goodput record was written at t=1000
// (after 50 s of the run); the launch before it wrote its last record at t=1010 and died; this
// one began at t=1030.
TEST(GoodputAccountTest, AResumedLaunchCountsTheRestartAndTheRedoneWork) {
  GoodputHistory history;
  GoodputSplit base;
  base.wall_s = 50;
  base.startup_s = 4;
  base.training_s = 40;
  history.base = base;
  history.base_time = 1000;
  history.last_time = 1010;
  GoodputAccount account(1030.0, history);
  account.firstStep(1032.0);
  const GoodputSplit split = account.at(1040.0);
  EXPECT_EQ(split.wall_s, 90.0);  // from the first launch's exec, at t=950
  EXPECT_EQ(split.redone_s, 10.0);
  EXPECT_EQ(split.restart_s, 20.0);
  EXPECT_EQ(split.startup_s, 6.0);
  EXPECT_EQ(split.training_s, 40.0);
  EXPECT_EQ(split.other_s, 90.0 - 6.0 - 40.0 - 10.0 - 20.0);
  // start() is once per launch: an in-place re-forming keeps the account.
  account.start(5000.0);
  EXPECT_EQ(account.at(1040.0).wall_s, 90.0);
}

TEST(GoodputHistoryTest, TakesTheCheckpointsRecordAndTheLastRecordsTime) {
  const auto dir = cumulus::testing::freshTestDir("goodput");
  const std::string path = (dir / "metrics.jsonl").string();
  std::ofstream(path)
      << R"({"type":"goodput","step":10,"wall_s":5.0,"training_s":3.0,"time":1000.0})"
      << "\n"
      << R"({"type":"train","step":15,"loss":1.0,"time":1005.0})"
      << "\n"
      << R"({"type":"goodput","step":20,"wall_s":15.0,"training_s":12.0,"time":1010.0})"
      << "\n"
      << R"({"type":"train","step":24,"lo)";  // the torn line of a killed writer
  const GoodputHistory at10 = readGoodputHistory(path, 10);
  ASSERT_TRUE(at10.base.has_value());
  EXPECT_EQ(at10.base->training_s, 3.0);
  EXPECT_EQ(at10.base_time, 1000.0);
  EXPECT_EQ(at10.last_time, 1010.0);
  EXPECT_EQ(readGoodputHistory(path, 25).base->training_s, 12.0);
  EXPECT_FALSE(readGoodputHistory(path, 9).base.has_value());
  EXPECT_FALSE(readGoodputHistory((dir / "none.jsonl").string(), 10).base.has_value());
  // A FIFO that no one writes: a blocking open would hang the resume (and this test).
  const std::string fifo = (dir / "fifo.jsonl").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    readGoodputHistory(fifo, 10);
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), fifo + ": is a FIFO, not a regular file");
  }
  std::filesystem::remove_all(dir);
}

TEST(StorePublisherTest, SendsRecordsInOrderAndTheNewestStatus) {
  comm::MemoryStore store;
  StorePublisherOptions options;
  options.rank = 3;
  {
    StorePublisher publisher(store, options);
    for (int step = 1; step <= 5; ++step) {
      publisher.record(nlohmann::ordered_json{{"type", "train"}, {"step", step}});
    }
    publisher.rankStatus(nlohmann::ordered_json{{"rank", 3}, {"step", 5}});
    publisher.flush();
    EXPECT_EQ(publisher.dropped(), 0);
  }
  EXPECT_EQ(store.add(comm::metricsRecordCountKey(), 0), 5);
  for (int n = 0; n < 5; ++n) {
    EXPECT_EQ(store.get(comm::metricsRecordKey(n)),
              "{\"type\":\"train\",\"step\":" + std::to_string(n + 1) + "}");
  }
  EXPECT_EQ(store.get(comm::metricsRankKey(3)), R"({"rank":3,"step":5})");
}

// A Store that fails: the publisher says so once and drops the rest; the caller never blocks.
class FailingStore final : public comm::MemoryStore {
 public:
  int64_t add(const std::string&, int64_t) override {
    throw std::runtime_error("store 127.0.0.1:1 unreachable");
  }
};

TEST(StorePublisherTest, AFailingStoreIsSaidOnceAndTrainingGoesOn) {
  FailingStore store;
  std::ostringstream warnings;
  StorePublisherOptions options;
  options.rank = 1;
  options.warnings = &warnings;
  StorePublisher publisher(store, options);
  publisher.record(nlohmann::ordered_json{{"type", "train"}, {"step", 1}});
  publisher.flush();
  for (int i = 0; i < 100; ++i) publisher.record(nlohmann::ordered_json{{"step", i}});
  EXPECT_EQ(publisher.dropped(), 101);
  EXPECT_EQ(warnings.str(),
            "warning: rank 1 stops sending live metrics to the Store (store 127.0.0.1:1 "
            "unreachable); training goes on, and metrics.jsonl is unchanged\n");
}

}  // namespace
}  // namespace cumulus::metrics
