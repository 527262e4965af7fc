// JobMetrics (launch/job_metrics.h): what node 0 makes of the agent's events and the workers'
// records, as Prometheus text, status JSON and records; and its reading of the Store.
#include "launch/job_metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "comm/memory_store.h"
#include "comm/store_keys.h"

namespace cumulus::launch {
namespace {

using nlohmann::json;

// Whether `text` has `line` as a whole line.
bool hasLine(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

class JobMetricsTest : public ::testing::Test {
 protected:
  double now_ = 1000;
  JobMetrics metrics_{"run-7", [this] { return now_; }};
};

TEST_F(JobMetricsTest, RendersTheJobAsPrometheusText) {
  metrics_.agentEvent("start", 0, 2);
  metrics_.addRecord(json{{"type", "train"},
                          {"step", 40},
                          {"epoch", 2},
                          {"loss", 0.5},
                          {"samples_per_sec", 1280.0},
                          {"time", 990.0}});
  metrics_.addRecord(json{{"type", "eval"},
                          {"step", 40},
                          {"test_loss", 0.625},
                          {"test_accuracy", 0.75},
                          {"time", 991.0}});
  metrics_.addRecord(
      json{{"type", "checkpoint"}, {"step", 40}, {"stall_ms", 3.0}, {"time", 992.0}});
  metrics_.addRecord(json{{"type", "balance"}, {"step", 40}, {"shares", {40, 24}}});
  metrics_.addRecord(json{
      {"type", "reform"}, {"cause", "failure"}, {"epoch", 1}, {"world_size", 2}, {"time", 993.0}});
  metrics_.addRecord(json{{"type", "goodput"},
                          {"step", 40},
                          {"wall_s", 20.0},
                          {"startup_s", 2.0},
                          {"training_s", 12.0},
                          {"comm_wait_s", 3.0},
                          {"other_s", 3.0},
                          {"productive_ratio", 0.75},
                          {"time", 994.0}});
  metrics_.agentEvent("failure", 0, 2, "signal SIGKILL", 1);
  metrics_.agentEvent("join", 0, 2, "replacement", 1);
  metrics_.agentEvent("failure", 0, 2, "a \"quoted\"\\cause\nline", 0);
  metrics_.setRankStatus(0, json{{"samples_per_sec", 800.0},
                                 {"step_time_ms", 50.0},
                                 {"comm_wait_ms", 10.0},
                                 {"time", 995.0}});
  metrics_.setRankStatus(1, json{{"samples_per_sec", 480.0},
                                 {"step_time_ms", 50.0},
                                 {"comm_wait_ms", 25.0},
                                 {"time", 995.0}});
  const std::string text = metrics_.prometheus();
  for (const char* line : {"# TYPE cumulus_up gauge",
                           "cumulus_up{state=\"running\"} 1",
                           "cumulus_step 40",
                           "cumulus_epoch 2",
                           "cumulus_world_size 2",
                           "cumulus_membership_epoch 1",
                           "cumulus_loss 0.5",
                           "cumulus_test_loss 0.625",
                           "cumulus_test_accuracy 0.75",
                           "cumulus_samples_per_second 1280",
                           "cumulus_rank_samples_per_second{rank=\"0\"} 800",
                           "cumulus_rank_samples_per_second{rank=\"1\"} 480",
                           "cumulus_rank_step_seconds{rank=\"1\"} 0.050000000000000003",
                           "cumulus_rank_comm_wait_seconds{rank=\"1\"} 0.025000000000000001",
                           "cumulus_batch_share_samples{rank=\"0\"} 40",
                           "cumulus_batch_share_samples{rank=\"1\"} 24",
                           "# TYPE cumulus_goodput_seconds_total counter",
                           "cumulus_goodput_seconds_total{category=\"training\"} 12",
                           "cumulus_goodput_seconds_total{category=\"restart\"} 0",
                           "cumulus_wall_seconds_total 20",
                           "cumulus_goodput_ratio 0.75",
                           "cumulus_checkpoints_total 1",
                           "cumulus_last_checkpoint_step 40",
                           "cumulus_last_checkpoint_age_seconds 8",
                           "cumulus_failures_total{cause=\"signal SIGKILL\"} 1",
                           "cumulus_failures_total{cause=\"a \\\"quoted\\\"\\\\cause\\nline\"} 1",
                           "cumulus_reformings_total{cause=\"failure\"} 1",
                           "cumulus_restarts_total 0",
                           "cumulus_replacements_total 1",
                           "cumulus_live_records_total 6"}) {
    EXPECT_TRUE(hasLine(text, line)) << "missing line: " << line << "\nin:\n" << text;
  }
  // Every sample's family has its HELP and TYPE first.
  EXPECT_LT(text.find("# HELP cumulus_step "), text.find("\ncumulus_step "));
}

// A record with a field of another type than the trainer writes is kept for the page and counted,
// and tells the metrics nothing.
TEST_F(JobMetricsTest, AMalformedRecordIsKeptAndCounted) {
  metrics_.addRecord(json{{"type", "train"}, {"step", 4}});
  metrics_.addRecord(json{{"type", "checkpoint"}, {"step", "four"}});
  metrics_.addRecord(json{{"type", "reform"}, {"cause", 3}});
  metrics_.addRecord(json{{"type", "balance"}, {"shares", "64,64"}});
  metrics_.addRecord(json::array({1, 2}));  // not a record at all: dropped
  const std::string text = metrics_.prometheus();
  EXPECT_TRUE(hasLine(text, "cumulus_step 4")) << text;
  EXPECT_TRUE(hasLine(text, "cumulus_live_records_total 4")) << text;
  EXPECT_TRUE(hasLine(text, "cumulus_live_records_malformed_total 3")) << text;
  EXPECT_TRUE(hasLine(text, "cumulus_checkpoints_total 0")) << text;
  EXPECT_EQ(text.find("cumulus_reformings_total{"), std::string::npos) << text;
  EXPECT_EQ(metrics_.records(0, 10)["records"].size(), 4u);
}

// With trainer.balance off there is no balance record: the shares are what each rank's status
// says it takes a step, once every rank of the group said it.
TEST_F(JobMetricsTest, SharesFromTheRanksStatusesWithoutBalance) {
  metrics_.agentEvent("start", 0, 2);
  metrics_.setRankStatus(0, json{{"samples", 64}});
  EXPECT_EQ(metrics_.status()["shares"], json::array());
  metrics_.setRankStatus(1, json{{"samples", 64}});
  EXPECT_EQ(metrics_.status()["shares"], json::array({64, 64}));
  EXPECT_EQ(metrics_.status()["ranks"][1]["share"], 64);
  EXPECT_TRUE(hasLine(metrics_.prometheus(), "cumulus_batch_share_samples{rank=\"1\"} 64"));
}

// A rollback restarts the trainer's split from the checkpoint's; the exported counters never
// go down, so Prometheus's rate() sees no reset.
TEST_F(JobMetricsTest, GoodputCountersNeverGoDown) {
  metrics_.addRecord(
      json{{"type", "goodput"}, {"training_s", 12.0}, {"wall_s", 20.0}, {"time", 1.0}});
  EXPECT_TRUE(
      hasLine(metrics_.prometheus(), "cumulus_goodput_seconds_total{category=\"training\"} 12"));
  metrics_.addRecord(json{{"type", "goodput"},
                          {"training_s", 9.0},
                          {"redone_s", 3.0},
                          {"wall_s", 24.0},
                          {"time", 2.0}});
  const std::string text = metrics_.prometheus();
  EXPECT_TRUE(hasLine(text, "cumulus_goodput_seconds_total{category=\"training\"} 12")) << text;
  EXPECT_TRUE(hasLine(text, "cumulus_goodput_seconds_total{category=\"redone\"} 3")) << text;
  EXPECT_TRUE(hasLine(text, "cumulus_wall_seconds_total 24")) << text;
}

// The bytes rank 0 sent come from the newest train record; the outer rounds of low-communication
// training only where a train record has them.
TEST_F(JobMetricsTest, RendersTheCommunicationCountersOfTheNewestTrainRecord) {
  metrics_.addRecord(json{{"type", "train"}, {"step", 10}, {"comm_bytes_sent", 1000}});
  metrics_.addRecord(json{{"type", "train"}, {"step", 20}, {"comm_bytes_sent", 123456789012}});
  std::string text = metrics_.prometheus();
  for (const char* line : {"# TYPE cumulus_comm_bytes_sent_total counter",
                           "cumulus_comm_bytes_sent_total 123456789012"}) {
    EXPECT_TRUE(hasLine(text, line)) << "missing line: " << line << "\nin:\n" << text;
  }
  EXPECT_LT(text.find("# HELP cumulus_comm_bytes_sent_total "),
            text.find("\ncumulus_comm_bytes_sent_total "));
  EXPECT_EQ(text.find("cumulus_outer_"), std::string::npos) << text;

  metrics_.addRecord(json{{"type", "train"},
                          {"step", 30},
                          {"comm_bytes_sent", 123456790000},
                          {"outer_rounds", 3},
                          {"outer_wait_s", 1.5}});
  text = metrics_.prometheus();
  for (const char* line :
       {"cumulus_comm_bytes_sent_total 123456790000", "# TYPE cumulus_outer_rounds_total counter",
        "cumulus_outer_rounds_total 3", "# TYPE cumulus_outer_wait_seconds_total counter",
        "cumulus_outer_wait_seconds_total 1.5"}) {
    EXPECT_TRUE(hasLine(text, line)) << "missing line: " << line << "\nin:\n" << text;
  }
}

TEST_F(JobMetricsTest, StatusAndRecordsForTheDashboard) {
  metrics_.agentEvent("start", 0, 2);
  metrics_.addRecord(json{{"type", "train"}, {"step", 8}, {"loss", 1.5}, {"time", 999.0}});
  metrics_.agentEvent("restart", 1, 2, "rank 1 failed (exit code 3)");
  metrics_.setState("finished");
  const json status = metrics_.status();
  EXPECT_EQ(status["run_id"], "run-7");
  EXPECT_EQ(status["state"], "finished");
  EXPECT_EQ(status["step"], 8);
  EXPECT_EQ(status["generation"], 1);
  EXPECT_EQ(status["counts"]["restarts"], 1);
  EXPECT_TRUE(status["test_loss"].is_null());
  EXPECT_TRUE(status["last_checkpoint"].is_null());

  const json all = metrics_.records(0, 1000);
  EXPECT_EQ(all["next"], 3);
  ASSERT_EQ(all["records"].size(), 3u);
  EXPECT_EQ(all["records"][0]["type"], "agent");
  EXPECT_EQ(all["records"][0]["event"], "start");
  EXPECT_EQ(all["records"][0]["time"], 1000.0);
  EXPECT_EQ(all["records"][1]["type"], "train");
  EXPECT_EQ(all["records"][2]["cause"], "rank 1 failed (exit code 3)");
  const json tail = metrics_.records(2, 1000);
  EXPECT_EQ(tail["next"], 3);
  EXPECT_EQ(tail["records"].size(), 1u);
  EXPECT_EQ(metrics_.records(1, 1)["records"].size(), 1u);
  EXPECT_EQ(metrics_.records(9, 10)["next"], 3);  // past the end: nothing, from the end
}

// The workers' side of the Store (metrics/store_publisher.h writes these keys): records in
// order, each removed once read; a number taken but never written is skipped after 5 s.
TEST_F(JobMetricsTest, ReadsTheWorkersRecordsAndStatusesFromTheStore) {
  comm::MemoryStore store;
  metrics_.agentEvent("start", 0, 2);
  for (int i = 0; i < 3; ++i) {
    const int64_t n = store.add(comm::metricsRecordCountKey(), 1) - 1;
    store.set(comm::metricsRecordKey(n), json{{"type", "train"}, {"step", 10 * (i + 1)}}.dump());
  }
  store.set(comm::metricsRankKey(1), json{{"samples_per_sec", 100.0}, {"time", 1.0}}.dump());
  store.set(comm::metricsRankKey(5), json{{"samples_per_sec", 9.0}}.dump());  // not in the group
  metrics_.poll(store);
  EXPECT_EQ(metrics_.status()["step"], 30);
  EXPECT_FALSE(store.tryGet(comm::metricsRecordKey(0)).has_value());
  ASSERT_EQ(metrics_.status()["ranks"].size(), 1u);
  EXPECT_EQ(metrics_.status()["ranks"][0]["rank"], 1);

  // Record 3's number is taken, its sender dies before writing it; record 4 is written.
  store.add(comm::metricsRecordCountKey(), 2);
  store.set(comm::metricsRecordKey(4), json{{"type", "train"}, {"step", 50}}.dump());
  metrics_.poll(store);
  EXPECT_EQ(metrics_.status()["step"], 30);  // waits for record 3
  now_ += 4.0;
  metrics_.poll(store);
  EXPECT_EQ(metrics_.status()["step"], 30);
  now_ += 2.0;
  metrics_.poll(store);
  EXPECT_EQ(metrics_.status()["step"], 50);
  EXPECT_EQ(metrics_.records(0, 100)["next"], 5);  // the start event and four records
}

}  // namespace
}  // namespace cumulus::launch
