// CheckpointManager::checkRoom and peakCheckpointBytes: the room a run's checkpoints take at their
// peak, and what the check says when a disk lacks it. The real disks are guard_process_test's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "cumulus/errors.h"
#include "tests/checkpoint/file_system_fault.h"

namespace cumulus::checkpoint {
namespace {

// A save writes its .tmp beside everything there and removes what falls out of `keep` after it.
TEST(CheckpointRoomTest, ThePeakIsTheCheckpointsKeptAndTheOneBeingWritten) {
  EXPECT_EQ(peakCheckpointBytes(100, 3, {}), 400u);
  EXPECT_EQ(peakCheckpointBytes(100, 1, {}), 200u);
  // A resume from one smaller checkpoint: it is replaced in turn, so the peak is a fresh start's.
  EXPECT_EQ(peakCheckpointBytes(100, 3, {60}), 400u);
  // One larger than a new one stays beside two new ones and the third being written.
  EXPECT_EQ(peakCheckpointBytes(100, 3, {150}), 450u);
  // More there than a lowered keep: all of them are there when the first save is written.
  EXPECT_EQ(peakCheckpointBytes(100, 1, {80, 70, 60}), 310u);
  // Four there: all of them before the first save, fewer after it.
  EXPECT_EQ(peakCheckpointBytes(100, 3, {90, 80, 70, 60}), 400u);
  // A large newest one stays beside the first new one while the second is written.
  EXPECT_EQ(peakCheckpointBytes(100, 2, {300, 10}), 500u);
}

TEST(CheckpointRoomTest, HugeSizesAndKeepsSaturateAtOnce) {
  EXPECT_EQ(peakCheckpointBytes(UINT64_MAX / 2, 3, {}), UINT64_MAX);
  EXPECT_EQ(peakCheckpointBytes(1, UINT64_MAX, {}), UINT64_MAX);
  EXPECT_EQ(peakCheckpointBytes(1000, 1000000000000000000ull, {UINT64_MAX, 5}), UINT64_MAX);
}

class CheckRoomTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cumulus_room_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { posix_.removeAll(dir_); }

  // The UserError of checkRoom(each) with `keep` kept on a disk that has `available` free.
  std::string shortage(uint64_t each, size_t keep, uint64_t available) {
    fs_.reportAvailable(available);
    CheckpointManager manager(dir_, keep, fs_);
    try {
      manager.checkRoom(each, "checkpoint.keep");
    } catch (const UserError& e) {
      return e.what();
    }
    return "(room enough)";
  }

  std::string dir_;
  PosixFileSystem posix_;
  FaultInjectingFileSystem fs_{posix_};
};

TEST_F(CheckRoomTest, TooLittleRoomSaysWhatIsNeededAndFreeAndTheKeepThatFits) {
  EXPECT_EQ(shortage(1 << 20, 3, 4 << 20), "(room enough)");
  EXPECT_EQ(shortage(1 << 20, 3, (5 << 19)),
            dir_ +
                " has 2.5 MiB (2621440 bytes) free, but keeping 3 checkpoints of this model "
                "(checkpoint.keep) while the next one is written takes up to 4.0 MiB (4194304 "
                "bytes), about 1.0 MiB (1048576 bytes) each: lower checkpoint.keep to 1 (up to "
                "2.0 MiB (2097152 bytes)), or choose a directory on a larger disk");
  EXPECT_EQ(shortage(1 << 20, 1, 1 << 20),
            dir_ +
                " has 1.0 MiB (1048576 bytes) free, but keeping 1 checkpoint of this model "
                "(checkpoint.keep) while the next one is written takes up to 2.0 MiB (2097152 "
                "bytes), about 1.0 MiB (1048576 bytes) each: choose a directory on a larger "
                "disk");
}

// The checkpoint a run resumes from counts as room, and the advice never asks to delete it.
TEST_F(CheckRoomTest, TheCheckpointsThereCountAsRoomAndAreNotToBeDeleted) {
  const std::string step = dir_ + "/" + CheckpointManager::dirName(8);
  posix_.createDir(step);
  posix_.writeFile(step + "/model.pt", std::string(100000, 'x'));
  const uint64_t there = posix_.usedBytes(step);
  ASSERT_GE(there, 100000u);
  const uint64_t each = 1 << 20;
  EXPECT_EQ(shortage(each, 3, 4 * each - there), "(room enough)");
  const std::string text = shortage(each, 3, 4 * each - there - 1);
  char expected[1024];
  std::snprintf(expected, sizeof expected,
                " has %.1f MiB (%llu bytes) free and %.1f MiB (%llu bytes) in its checkpoint, "
                "which the saves replace in turn, so room for 4.0 MiB (4194303 bytes); but "
                "keeping 3 checkpoints of this model (checkpoint.keep) while the next one is "
                "written takes up to 4.0 MiB (4194304 bytes), about 1.0 MiB (1048576 bytes) each: "
                "lower checkpoint.keep to 2 (up to 3.0 MiB (3145728 bytes)), or move the "
                "directory with its checkpoints to a larger disk",
                static_cast<double>(4 * each - there - 1) / (1 << 20),
                static_cast<unsigned long long>(4 * each - there - 1),
                static_cast<double>(there) / (1 << 20), static_cast<unsigned long long>(there));
  EXPECT_EQ(text, dir_ + expected);
  EXPECT_EQ(text.find("free space"), std::string::npos);
}

}  // namespace
}  // namespace cumulus::checkpoint
