#include "trainer/run_env.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cumulus::trainer {
namespace {

// RunEnv itself is base::RunEnv, tested in tests/base/run_env_test.cc.

TEST(RunEnvTest, ThreadsComeFromConfigOrCoresPerLocalWorker) {
  EXPECT_EQ(intraOpThreads(3, 8), 3);
  const int64_t all = intraOpThreads(0, 1);
  EXPECT_GE(all, 1);
  EXPECT_EQ(intraOpThreads(0, 2), std::max<int64_t>(1, all / 2));
  EXPECT_EQ(intraOpThreads(0, 1000000), 1);
}

}  // namespace
}  // namespace cumulus::trainer
