#include "trainer/step_count.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace cumulus::trainer {
namespace {

std::string errorOf(int64_t epochs, int64_t per_epoch, int64_t max_steps, int64_t batch) {
  try {
    plannedSteps(epochs, per_epoch, max_steps, batch);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(StepCountTest, EpochsTimesStepsCappedByMaxSteps) {
  EXPECT_EQ(plannedSteps(3, 32, 0, 128), 96);
  EXPECT_EQ(plannedSteps(3, 32, 50, 128), 50);
  EXPECT_EQ(plannedSteps(3, 32, 500, 128), 96);
}

// 2^59 + 1 epochs of 32 steps is 2^64 + 32 steps, which wraps to 32 in an int64.
TEST(StepCountTest, AnEpochCountThatOverflowsIsRefusedNamingTheKeys) {
  EXPECT_EQ(errorOf(576460752303423489, 32, 0, 128),
            "trainer.epochs: 576460752303423489 epochs of 32 steps is more steps than a 64-bit "
            "count holds; lower trainer.epochs or set trainer.max_steps");
  // With a cap the product is never needed: the cap runs.
  EXPECT_EQ(plannedSteps(576460752303423489, 32, 1000, 128), 1000);
}

TEST(StepCountTest, StepsWhoseSamplesOverflowAreRefused) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(errorOf(1, max / 2, 0, 4),
            "trainer.epochs / trainer.max_steps: 4611686018427387903 steps of 4 samples "
            "(trainer.global_batch_size) is more samples than a 64-bit count holds; lower "
            "trainer.epochs or trainer.max_steps");
  EXPECT_EQ(plannedSteps(1, max / 4, 0, 4), max / 4);
}

TEST(StepCountTest, NoStepsIsRefused) {
  EXPECT_EQ(errorOf(0, 32, 0, 128), "trainer.epochs / trainer.max_steps: the run has no steps");
  EXPECT_EQ(errorOf(3, 0, 0, 128), "trainer.epochs / trainer.max_steps: the run has no steps");
}

}  // namespace
}  // namespace cumulus::trainer
