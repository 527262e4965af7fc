// openRegularFile: a FIFO, a directory or a device is refused at once (open(2) of a FIFO with no
// writer would block forever), a regular file comes back blocking.
#include "base/regular_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace cumulus::base {
namespace {

namespace fs = std::filesystem;

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("regular_file_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RegularFileTest, ARegularFileOpensBlocking) {
  const std::string path = (dir_ / "data.bin").string();
  std::ofstream(path) << "abc";
  std::string problem = "stale";
  const Fd fd = openRegularFile(path, problem);
  ASSERT_TRUE(fd.valid()) << problem;
  EXPECT_EQ(problem, "");
  EXPECT_EQ(::fcntl(fd.get(), F_GETFL) & O_NONBLOCK, 0);
  char bytes[4] = {};
  EXPECT_EQ(::read(fd.get(), bytes, sizeof bytes), 3);
}

// No writer ever opens the FIFO: a blocking open would never return, and this test would hang.
TEST_F(RegularFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string problem;
  EXPECT_FALSE(openRegularFile(path, problem).valid());
  EXPECT_EQ(problem, "is a FIFO, not a regular file");
}

TEST_F(RegularFileTest, DirectoriesDevicesAndMissingFilesAreNamed) {
  std::string problem;
  EXPECT_FALSE(openRegularFile(dir_.string(), problem).valid());
  EXPECT_EQ(problem, "is a directory, not a regular file");
  EXPECT_FALSE(openRegularFile("/dev/null", problem).valid());
  EXPECT_EQ(problem, "is a character device, not a regular file");
  EXPECT_FALSE(openRegularFile((dir_ / "absent").string(), problem).valid());
  EXPECT_EQ(problem, "not found");
}

TEST_F(RegularFileTest, ASymbolicLinkToARegularFileOpens) {
  const std::string target = (dir_ / "target").string();
  std::ofstream(target) << "x";
  fs::create_symlink(target, dir_ / "link");
  std::string problem;
  EXPECT_TRUE(openRegularFile((dir_ / "link").string(), problem).valid()) << problem;
}

}  // namespace
}  // namespace cumulus::base
