// What cumulus-report reads (launch/run_report.h): a metrics.jsonl of any length into a page of
// bounded size, the whole run in its status, and each kind of file that is not a run's named.
#include "launch/run_report.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/command_line.h"

namespace cumulus::launch {
namespace {

namespace fs = std::filesystem;

TEST(RecordSelectionTest, ThinsEachTypeEvenlyKeepingTheFirstAndTheNewest) {
  RecordSelection selection(100);
  for (int64_t step = 0; step < 10000; ++step) {
    selection.add(2 * step, {{"type", "train"}, {"step", step}});
    if (step % 1000 == 0) selection.add(2 * step + 1, {{"type", "checkpoint"}, {"step", step}});
  }
  const nlohmann::json records = selection.take();
  std::vector<int64_t> train;
  int64_t checkpoints = 0;
  int64_t previous = -1;
  for (const nlohmann::json& r : records) {
    const int64_t step = r["step"];
    EXPECT_GE(step, previous) << "not in file order";
    previous = step;
    if (r["type"] == "train") train.push_back(step);
    if (r["type"] == "checkpoint") ++checkpoints;
  }
  EXPECT_EQ(checkpoints, 10);  // under the bound: all of them
  ASSERT_GE(train.size(), 51u);
  EXPECT_LE(train.size(), 101u);
  EXPECT_EQ(train.front(), 0);
  EXPECT_EQ(train.back(), 9999);
  const int64_t stride = train[1] - train[0];
  for (size_t i = 1; i + 1 < train.size(); ++i) EXPECT_EQ(train[i] - train[i - 1], stride) << i;
  EXPECT_EQ(selection.size(), 0u);
}

class RunReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("run_report_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    metrics_ = (dir_ / "metrics.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& text) { std::ofstream(metrics_, std::ios::binary) << text; }
  std::string errorOf() {
    try {
      readRunReport(dir_.string());
    } catch (const base::UsageError& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
  std::string metrics_;
};

TEST_F(RunReportTest, TheStatusIsTheWholeRunsAndThePageHoldsASelection) {
  std::string text;
  for (int step = 1; step <= 5000; ++step) {
    text += R"({"type":"train","step":)" + std::to_string(step) + R"(,"loss":0.5,"time":)" +
            std::to_string(step) + "}\n";
  }
  text += "\x01garbage in the middle\n";
  text += std::string(R"({"type":"summary","steps":5000,"time":5001})") + "\n";
  write(text + R"({"type":"tra)");
  const RunReport report = readRunReport(dir_.string(), 64);
  EXPECT_EQ(report.records_read, 5001);
  EXPECT_EQ(report.skipped, 2);
  EXPECT_EQ(report.status["step"], 5000);
  EXPECT_EQ(report.status["state"], "finished");
  EXPECT_EQ(report.status["run_id"], dir_.string());
  EXPECT_FALSE(report.status.contains("last_checkpoint"));
  EXPECT_LE(report.records.size(), 65u + 1u);
  EXPECT_EQ(report.records.back()["type"], "summary");
  EXPECT_EQ(report.records[report.records.size() - 2]["step"], 5000);
}

TEST_F(RunReportTest, AFileThatIsNotARunsIsNamedWithItsFirstBadLine) {
  write(std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
  EXPECT_EQ(errorOf(), metrics_ +
                           ": not a metrics.jsonl: line 1 is not a JSON record (a run's "
                           "metrics.jsonl holds one JSON object a line)");
  write("[1, 2]\n{\"type\":\"train\"");  // a JSON array, then a torn record
  EXPECT_EQ(errorOf(), metrics_ +
                           ": not a metrics.jsonl: line 1 is not a JSON record (a run's "
                           "metrics.jsonl holds one JSON object a line)");
}

TEST_F(RunReportTest, AnEmptyFileOrATornFirstRecordHasNoRecordYet) {
  write("");
  EXPECT_EQ(errorOf(), metrics_ + ": no record in it yet");
  write(R"({"type":"first_st)");
  EXPECT_EQ(errorOf(), metrics_ + ": no record in it yet");
}

TEST_F(RunReportTest, WhatIsNotAFileToReadIsNamed) {
  EXPECT_EQ(errorOf(), metrics_ +
                           ": cannot read it; RUN_DIR is the trainer.run_dir of a run (it holds "
                           "metrics.jsonl)");
  ASSERT_EQ(::mkfifo(metrics_.c_str(), 0600), 0);  // no writer: a blocking open would hang here
  EXPECT_EQ(errorOf(), metrics_ + ": is a FIFO, not a regular file");
  fs::remove(metrics_);
  fs::create_directory(metrics_);
  EXPECT_EQ(errorOf(), metrics_ + ": is a directory, not a regular file");
}

}  // namespace
}  // namespace cumulus::launch
