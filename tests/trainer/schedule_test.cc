#include "trainer/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cumulus::trainer {
namespace {

configs::ScheduleConfig schedule(const std::string& name, int64_t warmup = 0) {
  configs::ScheduleConfig c;
  c.name = *base::valueNamed<configs::ScheduleName>(name);
  c.warmup_steps = warmup;
  return c;
}

TEST(ScheduleTest, ConstantIsTheBaseRateEverywhere) {
  const LrSchedule s(schedule("constant"), 0.1, 100);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(99), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(1000), 0.1);
}

TEST(ScheduleTest, StepMultipliesByGammaEveryStepSize) {
  auto c = schedule("step");
  c.step_size = 10;
  c.gamma = 0.5;
  const LrSchedule s(c, 0.2, 100);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.2);
  EXPECT_DOUBLE_EQ(s.lr(9), 0.2);
  EXPECT_DOUBLE_EQ(s.lr(10), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(19), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(20), 0.05);
  EXPECT_DOUBLE_EQ(s.lr(35), 0.025);
}

TEST(ScheduleTest, CosineGoesFromBaseToMinLrOverTheRun) {
  auto c = schedule("cosine");
  c.min_lr = 0.01;
  const LrSchedule s(c, 0.11, 100);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.11);
  // Half way: min + (base - min) * (1 + cos(pi/2)) / 2 = 0.01 + 0.1 * 0.5.
  EXPECT_NEAR(s.lr(50), 0.06, 1e-15);
  // A quarter: 0.01 + 0.1 * (1 + cos(pi/4)) / 2 = 0.01 + 0.1 * 0.853553390593 = 0.0953553390593.
  EXPECT_NEAR(s.lr(25), 0.0953553390593, 1e-12);
  // Last step taken (t = 99 of T = 100): 0.01 + 0.1 * (1 + cos(0.99 pi)) / 2 = 0.010024671.
  EXPECT_NEAR(s.lr(99), 0.0100246719817, 1e-12);
  EXPECT_DOUBLE_EQ(s.lr(100), 0.01);
  EXPECT_DOUBLE_EQ(s.lr(150), 0.01);
}

TEST(ScheduleTest, WarmupRampsLinearlyThenHandsOverToTheBaseSchedule) {
  const LrSchedule constant(schedule("constant", 4), 0.8, 100);
  EXPECT_DOUBLE_EQ(constant.lr(0), 0.2);  // 0.8 * 1/4
  EXPECT_DOUBLE_EQ(constant.lr(1), 0.4);
  EXPECT_DOUBLE_EQ(constant.lr(3), 0.8);
  EXPECT_DOUBLE_EQ(constant.lr(4), 0.8);

  // Cosine runs on its own clock over the 100 - 10 = 90 steps after warm-up.
  const LrSchedule cosine(schedule("cosine", 10), 1.0, 100);
  EXPECT_DOUBLE_EQ(cosine.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(cosine.lr(9), 1.0);
  EXPECT_DOUBLE_EQ(cosine.lr(10), 1.0);
  EXPECT_NEAR(cosine.lr(55), 0.5, 1e-15);  // t = 45 of 90
  EXPECT_DOUBLE_EQ(cosine.lr(100), 0.0);

  auto step = schedule("step", 5);
  step.step_size = 3;
  step.gamma = 0.1;
  const LrSchedule stepped(step, 1.0, 100);
  EXPECT_DOUBLE_EQ(stepped.lr(4), 1.0);
  EXPECT_DOUBLE_EQ(stepped.lr(7), 1.0);       // t = 2
  EXPECT_NEAR(stepped.lr(8), 0.1, 1e-15);     // t = 3
  EXPECT_NEAR(stepped.lr(13), 0.01, 1e-15);   // t = 8
  EXPECT_NEAR(stepped.lr(14), 0.001, 1e-15);  // t = 9
}

// An unknown schedule name never gets here: the config refuses it (ParseTest.OutOfRangeValues).
TEST(ScheduleTest, RejectsBadArguments) {
  auto bad_step = schedule("step");
  bad_step.step_size = 0;
  EXPECT_THROW(LrSchedule(bad_step, 0.1, 10), std::invalid_argument);
  EXPECT_THROW(LrSchedule(schedule("constant", -1), 0.1, 10), std::invalid_argument);
  EXPECT_THROW(LrSchedule(schedule("constant"), 0.0, 10), std::invalid_argument);
  EXPECT_THROW(LrSchedule(schedule("constant"), 0.1, 0), std::invalid_argument);
}

}  // namespace
}  // namespace cumulus::trainer
