// Seeded spot traces (cumulus-spot) over a one-worker cumulus-train job: whatever the trace does
// (a SIGTERM during start-up, mid-step, during a checkpoint, after the last step), the job ends
// with the parameters of the uninterrupted run. One ctest entry per seed, a few seconds each.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "tests/trainer/process_runner.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::lastAfter;
using cumulus::testing::runProcess;

const std::vector<std::pair<std::string, std::string>> kNoGroup = {{"WORLD_SIZE", ""},
                                                                   {"RANK", ""},
                                                                   {"CUMULUS_RUN_ID", ""},
                                                                   {"MASTER_ADDR", ""},
                                                                   {"MASTER_PORT", ""}};

std::vector<std::string> job(const std::string& run_dir, const std::string& resume) {
  return {CUMULUS_BINARY_DIR "/bin/cumulus-train",
          CUMULUS_SOURCE_DIR "/configs/smoke.yaml",
          "--resume",
          resume,
          "--set",
          "trainer.run_dir=" + run_dir,
          "--set",
          "trainer.epochs=12",
          "--set",
          "model.dropout=0.25",
          "--set",
          "checkpoint.every_steps=8",
          "--set",
          "trainer.log_every_steps=16"};
}

fs::path scratch(const std::string& name) {
  return fs::path(::testing::TempDir()) / ("spot_" + std::to_string(::getpid()) + "_" + name);
}

// The uninterrupted run's digest, computed once per process.
const std::string& expectedDigest() {
  static std::once_flag once;
  static std::string digest;
  std::call_once(once, [] {
    const fs::path dir = scratch("base");
    fs::remove_all(dir);
    const auto r = runProcess(job(dir.string(), "none"), kNoGroup);
    digest = lastAfter(r.output, "final parameters sha256 ");
    fs::remove_all(dir);
  });
  return digest;
}

class SpotTraceJobTest : public ::testing::TestWithParam<int> {};

TEST_P(SpotTraceJobTest, EndsBitIdenticalToTheUninterruptedRun) {
  const std::string expected = expectedDigest();
  ASSERT_EQ(expected.size(), 64u);
  const fs::path dir = scratch("trace" + std::to_string(GetParam()));
  fs::remove_all(dir);
  std::vector<std::string> argv = {CUMULUS_BINARY_DIR "/bin/cumulus-spot",
                                   "--seed=" + std::to_string(GetParam()),
                                   "--mean-interval=0.7",
                                   "--notice=10",
                                   "--relaunch-delay=0",
                                   "--max-preemptions=3",
                                   "--timeout=100",
                                   "--metrics=" + (dir / "run" / "metrics.jsonl").string(),
                                   "--"};
  for (auto& a : job((dir / "run").string(), "auto")) argv.push_back(a);
  const auto r = runProcess(argv, kNoGroup);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"completed\":true"), std::string::npos) << r.output;
  EXPECT_EQ(lastAfter(r.output, "final parameters sha256 "), expected) << r.output;
  // The trace's notices really came (not every launch ends before its notice).
  const std::string json = r.output.substr(r.output.rfind("{\"completed\""));
  RecordProperty("report", json);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SpotTraceJobTest, ::testing::Range(0, 20));

}  // namespace
}  // namespace cumulus::trainer
