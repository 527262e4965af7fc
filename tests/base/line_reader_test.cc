// LineReader: lines across read chunks, a last line without '\n', and a line too long to keep
// (cut, flagged, and the next line still found).
#include "base/line_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/regular_file.h"

namespace cumulus::base {
namespace {

namespace fs = std::filesystem;

class LineReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("line_reader_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every line of a file holding `text`, read with `max_line`.
  std::vector<Line> linesOf(const std::string& text, size_t max_line) {
    const std::string path = (dir_ / "lines").string();
    std::ofstream(path, std::ios::binary) << text;
    std::string problem;
    LineReader reader(openRegularFile(path, problem), path, max_line);
    std::vector<Line> lines;
    for (Line line; reader.next(line);) lines.push_back(line);
    return lines;
  }

  fs::path dir_;
};

TEST_F(LineReaderTest, ReadsLinesAcrossChunksAndATornLastLine) {
  const std::string big(200000, 'b');  // spans several 64 KiB reads
  const std::vector<Line> lines = linesOf("a\n\n" + big + "\n{\"type\":\"tra", 1 << 20);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].text, "a");
  EXPECT_EQ(lines[1].text, "");
  EXPECT_EQ(lines[2].text, big);
  EXPECT_FALSE(lines[2].cut);
  EXPECT_EQ(lines[3].text, "{\"type\":\"tra");
  EXPECT_FALSE(lines[3].ended);
  EXPECT_TRUE(lines[0].ended);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i].number, static_cast<int64_t>(i + 1));
}

TEST_F(LineReaderTest, ALineOverTheLimitIsCutAndTheNextOneStillFound) {
  const std::vector<Line> lines = linesOf(std::string(300000, 'x') + "\nnext\n", 10);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, std::string(10, 'x'));
  EXPECT_TRUE(lines[0].cut);
  EXPECT_EQ(lines[1].text, "next");
  EXPECT_FALSE(lines[1].cut);
  EXPECT_EQ(lines[1].number, 2);
}

TEST_F(LineReaderTest, AnEmptyFileHasNoLines) { EXPECT_TRUE(linesOf("", 10).empty()); }

TEST_F(LineReaderTest, ReadRegularFileStopsAtItsLimitAndRefusesAFifo) {
  const std::string path = (dir_ / "text").string();
  std::ofstream(path) << "abcdef";
  std::string problem;
  EXPECT_EQ(readRegularFile(path, problem).value_or("?"), "abcdef");
  EXPECT_EQ(readRegularFile(path, problem, 4).value_or("?"), "abcd");
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(readRegularFile(fifo, problem));
  EXPECT_EQ(problem, "is a FIFO, not a regular file");
}

}  // namespace
}  // namespace cumulus::base
