#include "launch/spot_report.h"

#include <gtest/gtest.h>

namespace cumulus::launch {
namespace {

// A metrics.jsonl after a launch that started at Unix time 1000 (at 1.0 s on the report's clock):
// the records before its start are an earlier launch's.
TEST(SpotReportTest, ReadsTheLaunchsRecordsFromMetrics) {
  const std::string jsonl =
      R"({"type":"train","step":40,"loss":0.5,"time":990.0})"
      "\n"
      R"({"type":"checkpoint","step":40,"stall_ms":9.0,"path":"/run/ckpt/step-00000040","time":990.5})"
      "\n"
      R"({"type":"resume","step":40,"world_size":2,"time":1000.5})"
      "\n"
      R"({"type":"first_step","step":41,"seconds_since_exec":1.2,"time":1001.5})"
      "\n"
      R"({"type":"train","step":48,"epoch":2,"loss":0.1234,"time":1002.0})"
      "\n"
      R"({"type":"checkpoint","step":50,"stall_ms":1.25,"path":"/run/ckpt/step-00000050","time":1003.0})"
      "\n"
      R"({"type":"checkpoint","step":60,"stall_ms":0.75,"path":"/run/ckpt/step-00000060","time":1004.0})"
      "\n"
      R"({"type":"preempted","step":63,"checkpoint":"/run/ckpt/step-00000063","time":1005.0})"
      "\n"
      R"({"type":"trained","step":63,"steps":23,"seconds":4.5,"time":1005.0})"
      "\n"
      R"({"type":"future_kind","step":70,"time":1005.5})"
      "\n"
      R"({"type":"train","step":64,"lo)";  // torn
  LaunchRecord r;
  r.start_s = 1.0;
  observeMetrics(jsonl, 1000.0, r);
  EXPECT_EQ(r.resumed_from_step, 40);
  ASSERT_TRUE(r.first_step_s.has_value());
  EXPECT_EQ(*r.first_step_s, 2.5);
  EXPECT_EQ(r.stall_ms, (std::vector<double>{1.25, 0.75}));
  EXPECT_EQ(r.preempted_step, 63);
  EXPECT_EQ(r.trained_steps, 23);
  EXPECT_EQ(r.train_seconds, 4.5);
  EXPECT_EQ(r.max_step, 70);  // an unknown record still tells how far the run got
}

TEST(SpotReportTest, OnlyTheFirstFirstStepCountsAndBadFieldsAreNamed) {
  LaunchRecord r;
  observeMetrics(R"({"type":"first_step","step":1,"time":5})"
                 "\n"
                 R"({"type":"first_step","step":2,"time":6})",
                 4.0, r);
  ASSERT_TRUE(r.first_step_s.has_value());
  EXPECT_EQ(*r.first_step_s, 1.0);
  EXPECT_EQ(r.max_step, 2);
  try {
    observeMetrics(R"({"type":"train","step":"three","time":5})", 4.0, r);
    FAIL() << "a step that is not a number was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  R"(metrics record {"type":"train","step":"three","time":5}: )", 0),
              0u)
        << e.what();
  }
}

std::vector<LaunchRecord> threeLaunches() {
  std::vector<LaunchRecord> records(3);
  records[0] = {};
  records[0].start_s = 0;
  records[0].notice_s = 10;
  records[0].end_s = 10.5;
  records[0].exit_code = 75;
  records[0].first_step_s = 1;
  records[0].max_step = 100;
  records[0].preempted_step = 100;
  records[0].stall_ms = {2, 4};
  records[0].train_seconds = 9;
  records[1].index = 1;
  records[1].start_s = 11.5;
  records[1].first_step_s = 13.5;
  records[1].resumed_from_step = 100;
  records[1].notice_s = 20;
  records[1].end_s = 25;  // killed at the end of a 5 s notice: the checkpoint never finished
  records[1].killed = true;
  records[1].signal = 9;
  records[1].exit_code = -1;
  records[1].max_step = 160;
  records[1].stall_ms = {3};
  records[1].train_seconds = 6;
  records[2].index = 2;
  records[2].start_s = 26;
  records[2].first_step_s = 29;
  records[2].resumed_from_step = 150;  // its newest checkpoint: 10 steps lost
  records[2].end_s = 40;
  records[2].max_step = 250;
  records[2].train_seconds = 5;
  return records;
}

TEST(SpotReportTest, Arithmetic) {
  SpotReportOptions options;
  options.baseline_seconds = 30;
  options.global_batch = 64;
  const SpotReport r = summarize(threeLaunches(), options);
  EXPECT_EQ(r.launches, 3);
  EXPECT_EQ(r.preemptions, 2);
  EXPECT_EQ(r.kills, 1);
  EXPECT_EQ(r.crashes, 0);
  EXPECT_TRUE(r.completed);
  EXPECT_DOUBLE_EQ(r.wall_s, 40);
  EXPECT_EQ(r.final_step, 250);
  EXPECT_EQ(r.steps_lost, 10);
  EXPECT_DOUBLE_EQ(r.goodput_steps_per_s, 250.0 / 40);
  EXPECT_DOUBLE_EQ(r.goodput_samples_per_s, 250.0 * 64 / 40);
  EXPECT_DOUBLE_EQ(r.goodput_ratio, 0.75);
  EXPECT_DOUBLE_EQ(r.notice_to_exit_mean_s, (0.5 + 5) / 2);
  EXPECT_DOUBLE_EQ(r.notice_to_exit_max_s, 5);
  EXPECT_DOUBLE_EQ(r.restart_to_first_step_mean_s, (2 + 3) / 2.0);  // launches 1 and 2
  EXPECT_DOUBLE_EQ(r.restart_to_first_step_max_s, 3);
  EXPECT_EQ(r.checkpoints, 3);
  EXPECT_DOUBLE_EQ(r.stall_share, 0.009 / 20);
  EXPECT_EQ(reportJson(r),
            "{\"completed\":true,\"launches\":3,\"preemptions\":2,\"kills\":1,\"crashes\":0,"
            "\"wall_s\":40.0,\"final_step\":250,\"steps_lost\":10,"
            "\"goodput_steps_per_s\":6.25,\"goodput_samples_per_s\":400.0,"
            "\"goodput_ratio\":0.75,\"notice_to_exit_mean_s\":2.75,"
            "\"notice_to_exit_max_s\":5.0,\"restart_to_first_step_mean_s\":2.5,"
            "\"restart_to_first_step_max_s\":3.0,\"checkpoints\":3,\"stall_share\":0.00045}");
  const std::string table = reportTable(threeLaunches(), r);
  EXPECT_NE(table.find("final step 250, steps lost 10, goodput 6.250 steps/s = 400.0 samples/s "
                       "(75.0% of uninterrupted)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("signal 9 (killed)"), std::string::npos) << table;
}

// The trainer's goodput records: the newest of each launch, and the last launch's in the report,
// its table and its JSON.
TEST(SpotReportTest, ReportsTheTrainersGoodputSplit) {
  std::vector<LaunchRecord> records(2);
  observeMetrics(
      R"({"type":"goodput","step":8,"wall_s":4.0,"training_s":3.0,"productive_ratio":0.75,"time":10})"
      "\n"
      R"({"type":"goodput","step":16,"wall_s":8.0,"training_s":5.0,"restart_s":1.5,"productive_ratio":0.625,"time":11})",
      9.0, records[1]);
  ASSERT_EQ(records[1].goodput.size(), 4u);
  EXPECT_EQ(records[1].goodput[2], (std::pair<std::string, double>("restart_s", 1.5)));
  records[1].end_s = 8;
  const SpotReport r = summarize(records, {});
  EXPECT_EQ(r.goodput, records[1].goodput);
  EXPECT_NE(reportTable(records, r)
                .find("trainer's goodput: wall 8.00 s training 5.00 s "
                      "restart 1.50 s productive 62.5%\n"),
            std::string::npos)
      << reportTable(records, r);
  const std::string json = reportJson(r);
  EXPECT_NE(
      json.find(
          R"("goodput":{"wall_s":8.0,"training_s":5.0,"restart_s":1.5,"productive_ratio":0.625})"),
      std::string::npos)
      << json;
}

// Launches killed during start-up (before any step) lose nothing and resume nothing.
TEST(SpotReportTest, LaunchesThatNeverTrainedDoNotCountAsLoss) {
  std::vector<LaunchRecord> records(4);
  records[0].first_step_s = 0.5;
  records[0].max_step = 145;
  records[0].notice_s = 1;
  records[0].end_s = 1.1;
  records[1].start_s = 1.1;
  records[1].notice_s = 1.2;
  records[1].end_s = 1.2;
  records[1].signal = 15;
  records[2] = records[1];
  records[3].start_s = 1.5;
  records[3].first_step_s = 2;
  records[3].resumed_from_step = 145;
  records[3].max_step = 192;
  records[3].end_s = 3;
  const SpotReport r = summarize(records, {});
  EXPECT_EQ(r.steps_lost, 0);
  EXPECT_EQ(r.preemptions, 3);
  EXPECT_DOUBLE_EQ(r.restart_to_first_step_mean_s, 0.5);
  records[3].resumed_from_step = 140;  // the stop's checkpoint was lost: 5 steps run twice
  EXPECT_EQ(summarize(records, {}).steps_lost, 5);
}

TEST(SpotReportTest, CrashesAndIncompleteRuns) {
  std::vector<LaunchRecord> records(2);
  records[0].exit_code = 1;
  records[0].end_s = 2;
  records[1].start_s = 3;
  records[1].exit_code = 1;
  records[1].end_s = 4;
  const SpotReport r = summarize(records, {});
  EXPECT_EQ(r.crashes, 2);
  EXPECT_FALSE(r.completed);
  EXPECT_EQ(r.goodput_ratio, 0);
  EXPECT_EQ(r.goodput_samples_per_s, 0);
  EXPECT_EQ(summarize({}, {}).launches, 0);
}

}  // namespace
}  // namespace cumulus::launch
