#include "trainer/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

namespace cumulus::trainer {
namespace {

TEST(MetricsTest, JsonLineKeepsOrderAndFormatsNumbers) {
  const std::string line = JsonLine()
                               .add("type", "train")
                               .add("step", int64_t{1406})
                               .add("loss", 0.25)
                               .add("lr", 1e-3)
                               .add("ok", true)
                               .str();
  EXPECT_EQ(line, R"({"type":"train","step":1406,"loss":0.25,"lr":0.001,"ok":true})");
}

TEST(MetricsTest, NonFiniteNumbersBecomeNull) {
  EXPECT_EQ(JsonLine().add("loss", std::nan("")).add("x", HUGE_VAL).str(),
            R"({"loss":null,"x":null})");
}

TEST(MetricsTest, StringsAreEscaped) {
  EXPECT_EQ(configs::jsonQuote("a\"b\\c\nd\x01"), R"("a\"b\\c\nd\u0001")");
}

TEST(MetricsTest, LogWritesOneObjectPerLine) {
  const std::string path =
      ::testing::TempDir() + "/metrics_test_" + std::to_string(::getpid()) + ".jsonl";
  {
    MetricsLog log(path);
    log.write(JsonLine().add("step", 1));
    log.write(JsonLine().add("step", 2));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "{\"step\":1}\n{\"step\":2}\n");
  std::remove(path.c_str());
  EXPECT_THROW(MetricsLog("/nonexistent-dir/metrics.jsonl"), std::runtime_error);
}

// A resumed launch continues the file: the records of steps it runs again, the summary of a
// finished launch and a torn last line (a SIGKILLed writer) go; the rest stays, in order.
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
        << R"({"type":"train","step":40,"lo)";
  }
  {
    MetricsLog log = MetricsLog::continueAfter(path, 20);
    log.write(JsonLine().add("type", "train").add("step", int64_t{30}));
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
                        R"({"type":"train","step":30})"
                        "\n");
  std::remove(path.c_str());
  // No earlier file: an empty one, appended to.
  {
    MetricsLog log = MetricsLog::continueAfter(path, 5);
    log.write(JsonLine().add("step", 6));
  }
  std::ifstream again(path);
  std::stringstream text2;
  text2 << again.rdbuf();
  EXPECT_EQ(text2.str(), "{\"step\":6}\n");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cumulus::trainer
