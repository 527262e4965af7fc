// OutputMux (launch/output_mux.h): a worker's output through a real pipe, copied to the console
// with its prefix, and the marked line the launcher repeats in its last word.
#include "launch/output_mux.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

namespace cumulus::launch {
namespace {

constexpr const char* kError = ": error: ";

// What rank 0 printing `text` leaves: the console's lines and the mux itself, to ask.
class OutputMuxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = ::testing::TempDir() + "/output_mux_" + std::to_string(::getpid()) + ".log";
    console_ = ::open_memstream(&console_text_, &console_size_);
    ASSERT_NE(console_, nullptr);
    mux_ = std::make_unique<OutputMux>(console_);
    mux_->watchFor(kError);
  }
  void TearDown() override {
    mux_.reset();
    std::fclose(console_);
    std::free(console_text_);
    std::filesystem::remove(log_);
  }

  // Sends `text` through a pipe as rank 0's output and copies all of it.
  void print(const std::string& text) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fds[1]);
    mux_->add(0, fds[0], log_);
    while (mux_->following(0) && mux_->pump(1000).empty()) {
    }
    mux_->finish(0);
    ::close(fds[0]);
  }
  std::string console() {
    std::fflush(console_);
    return std::string(console_text_, console_size_);
  }

  std::string log_;
  char* console_text_ = nullptr;
  size_t console_size_ = 0;
  FILE* console_ = nullptr;
  std::unique_ptr<OutputMux> mux_;
};

// cumulus-train's error for a run directory of another experiment lists the keys below its first
// line; the launcher's one line must name them too.
TEST_F(OutputMuxTest, AnErrorsIndentedLinesJoinTheMarkedLine) {
  print(
      "step 1\n"
      "cumulus-train: error: /r/checkpoints holds checkpoints of another experiment, which "
      "differs in 2 keys:\n"
      "  optimizer.lr: 0.05 -> 0.01\n"
      "  trainer.seed: 1 -> 9\n"
      "resume it with --resume auto\n");
  EXPECT_EQ(mux_->lastMarkedLine(0, kError),
            "cumulus-train: error: /r/checkpoints holds checkpoints of another experiment, which "
            "differs in 2 keys: optimizer.lr: 0.05 -> 0.01; trainer.seed: 1 -> 9");
  // The console shows the lines as the worker printed them.
  EXPECT_NE(console().find("[rank0]   optimizer.lr: 0.05 -> 0.01\n[rank0]   trainer.seed: 1 -> 9\n"
                           "[rank0] resume it with --resume auto\n"),
            std::string::npos)
      << console();
}

TEST_F(OutputMuxTest, OnlyTheLinesRightAfterTheMarkedOneJoinIt) {
  print(
      "  indented before any error\n"
      "w: error: first\n"
      "not indented\n"
      "  indented after another line\n"
      "w: error: second\n"
      "\tone key: 1 -> 2\n");
  EXPECT_EQ(mux_->lastMarkedLine(0, kError), "w: error: second; one key: 1 -> 2");
}

TEST_F(OutputMuxTest, AJoinedLineStopsAtItsBound) {
  std::string text = "w: error: keys:\n";
  for (int i = 0; i < 1000; ++i) text += "  key" + std::to_string(i) + ": 0 -> 1\n";
  print(text);
  const std::string marked = mux_->lastMarkedLine(0, kError);
  EXPECT_EQ(marked.size(), 4096u);
  EXPECT_EQ(marked.rfind("w: error: keys: key0: 0 -> 1; key1: 0 -> 1; ", 0), 0u) << marked;
}

}  // namespace
}  // namespace cumulus::launch
