#include "checkpoint/checkpoint_schedule.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cumulus::checkpoint {
namespace {

TEST(CheckpointScheduleTest, OffByDefault) {
  CheckpointSchedule schedule(0, 0, [] { return 0.0; });
  EXPECT_FALSE(schedule.enabled());
  for (int64_t s = 1; s < 100; ++s) EXPECT_FALSE(schedule.due(s));
  EXPECT_EQ(schedule.secondsUntilDue(), -1);
}

TEST(CheckpointScheduleTest, EveryNSteps) {
  CheckpointSchedule schedule(5, 0, [] { return 0.0; });
  std::vector<int64_t> due;
  for (int64_t s = 1; s <= 16; ++s) {
    if (schedule.due(s)) due.push_back(s);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{5, 10, 15}));
}

TEST(CheckpointScheduleTest, EveryTSecondsFromTheLastSave) {
  double now = 10;
  CheckpointSchedule schedule(0, 60, [&] { return now; });
  EXPECT_FALSE(schedule.due(1));
  EXPECT_DOUBLE_EQ(schedule.secondsUntilDue(), 60);
  now = 69.9;
  EXPECT_FALSE(schedule.due(2));
  now = 70;
  EXPECT_TRUE(schedule.due(3));
  EXPECT_TRUE(schedule.due(4));  // until a save happens
  EXPECT_DOUBLE_EQ(schedule.secondsUntilDue(), 0);
  now = 75;
  schedule.markSaved();
  EXPECT_FALSE(schedule.due(5));
  now = 135;
  EXPECT_TRUE(schedule.due(6));
}

TEST(CheckpointScheduleTest, StepsOrSeconds) {
  double now = 0;
  CheckpointSchedule schedule(100, 30, [&] { return now; });
  EXPECT_TRUE(schedule.due(100));
  EXPECT_FALSE(schedule.due(101));
  now = 31;
  EXPECT_TRUE(schedule.due(102));
}

TEST(CheckpointScheduleTest, NegativeIsRefusedWithTheKey) {
  try {
    CheckpointSchedule(-1, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "checkpoint.every_steps: -1 is negative; use 0 to turn it off");
  }
  EXPECT_THROW(CheckpointSchedule(0, -2.0), std::invalid_argument);
}

}  // namespace
}  // namespace cumulus::checkpoint
