#include "metrics/metrics_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "cumulus/errors.h"

namespace cumulus::metrics {
namespace {

// A wall clock that always says 1.5 s after the epoch.
double fixedClock() { return 1.5; }

// What MetricsLog writes for one record.
std::string written(const nlohmann::ordered_json& record) {
  const std::string path =
      ::testing::TempDir() + "/metrics_record_" + std::to_string(::getpid()) + ".jsonl";
  {
    MetricsLog log(path, fixedClock);
    log.write(record);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return text.str();
}

TEST(MetricsTest, RecordsKeepKeyOrderAndExactValues) {
  const std::string line = written(
      {{"type", "train"}, {"step", int64_t{1406}}, {"loss", 0.25}, {"lr", 1e-3}, {"ok", true}});
  EXPECT_EQ(line,
            "{\"type\":\"train\",\"step\":1406,\"loss\":0.25,\"lr\":0.001,\"ok\":true,"
            "\"time\":1.5}\n");
  // A float32 loss reads back as the same float.
  const float loss = 0.1f;
  const auto back = nlohmann::json::parse(written({{"loss", loss}}));
  EXPECT_EQ(back["loss"].get<float>(), loss);
}

TEST(MetricsTest, NonFiniteNumbersBecomeNull) {
  EXPECT_EQ(written({{"loss", std::nan("")}, {"x", HUGE_VAL}}),
            "{\"loss\":null,\"x\":null,\"time\":1.5}\n");
}

TEST(MetricsTest, StringsAreEscaped) {
  EXPECT_EQ(written({{"s", "a\"b\\c\nd\x01"}}), R"({"s":"a\"b\\c\nd\u0001","time":1.5})"
                                                "\n");
}

TEST(MetricsTest, LogWritesOneObjectPerLine) {
  const std::string path =
      ::testing::TempDir() + "/metrics_test_" + std::to_string(::getpid()) + ".jsonl";
  {
    MetricsLog log(path, fixedClock);
    log.write({{"step", 1}});
    log.write({{"step", 2}});
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "{\"step\":1,\"time\":1.5}\n{\"step\":2,\"time\":1.5}\n");
  std::remove(path.c_str());
  EXPECT_THROW(MetricsLog("/nonexistent-dir/metrics.jsonl"), std::runtime_error);
}

// metrics.jsonl a FIFO that no one reads or writes: opening it blocked until someone did, on a
// fresh run (to write) and on a resume (to read). Both are refused at once, naming it.
TEST(MetricsTest, AFifoAsTheLogIsRefusedWithoutWaiting) {
  const std::string path =
      ::testing::TempDir() + "/metrics_fifo_" + std::to_string(::getpid()) + ".jsonl";
  std::remove(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  for (const bool resume : {false, true}) {
    try {
      if (resume) {
        MetricsLog::continueAfter(path, 20, fixedClock);
      } else {
        MetricsLog log(path, fixedClock);
      }
      ADD_FAILURE() << "no error, resume " << resume;
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()), path + ": is a FIFO, not a regular file");
    }
  }
  std::remove(path.c_str());
}

// A resumed launch continues the file: the records of steps it runs again, the summary of a
// finished launch, lines without a step, lines that are not JSON and a torn last line (a
// SIGKILLed writer) go; the rest stays, in order.
TEST(MetricsTest, ContinueAfterKeepsTheStepsUpToTheCheckpoint) {
  const std::string path =
      ::testing::TempDir() + "/metrics_continue_" + std::to_string(::getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    out << R"({"type":"train","step":10,"loss":1})"
        << "\n"
        << R"({"type":"train","step":20,"loss":0.5})"
        << "\n"
        << R"({"type":"eval","step":20,"test_accuracy":0.5})"
        << "\n"
        << R"({"type":"train","step":30,"loss":0.25})"
        << "\n"
        << R"({"type":"summary","step":30,"seconds":3})"
        << "\n"
        << R"({"type":"note","text":"no step"})"
        << "\n"
        << R"(not json, "step":1})"
        << "\n"
        << R"({"type":"train","step":40,"lo)";
  }
  {
    MetricsLog log = MetricsLog::continueAfter(path, 20, fixedClock);
    log.write({{"type", "train"}, {"step", int64_t{30}}});
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), R"({"type":"train","step":10,"loss":1})"
                        "\n"
                        R"({"type":"train","step":20,"loss":0.5})"
                        "\n"
                        R"({"type":"eval","step":20,"test_accuracy":0.5})"
                        "\n"
                        R"({"type":"train","step":30,"time":1.5})"
                        "\n");
  std::remove(path.c_str());
  // No earlier file: an empty one, appended to.
  {
    MetricsLog log = MetricsLog::continueAfter(path, 5, fixedClock);
    log.write({{"step", 6}});
  }
  std::ifstream again(path);
  std::stringstream text2;
  text2 << again.rdbuf();
  EXPECT_EQ(text2.str(), "{\"step\":6,\"time\":1.5}\n");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cumulus::metrics
