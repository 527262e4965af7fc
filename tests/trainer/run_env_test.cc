#include "trainer/run_env.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cumulus/errors.h"

namespace cumulus::trainer {
namespace {

// RunEnv itself is base::RunEnv, tested in tests/base/run_env_test.cc.

TEST(RunEnvTest, ThreadsComeFromConfigOrCoresPerLocalWorker) {
  EXPECT_EQ(intraOpThreads(3, 8, 4), 3);
  EXPECT_EQ(intraOpThreads(4, 1, 4), 4);
  EXPECT_EQ(intraOpThreads(0, 2, 4), 2);
  EXPECT_EQ(intraOpThreads(0, 1000000, 4), 1);
  const int64_t all = intraOpThreads(0, 1);
  EXPECT_GE(all, 1);
  EXPECT_EQ(intraOpThreads(0, 2), std::max<int64_t>(1, all / 2));
  EXPECT_EQ(intraOpThreads(all, 1), all);
}

TEST(RunEnvTest, MoreThreadsThanCoresIsAUserError) {
  try {
    intraOpThreads(1000000, 1, 2);
    FAIL() << "no error";
  } catch (const cumulus::UserError& e) {
    EXPECT_STREQ(e.what(),
                 "trainer.threads: 1000000 is more than the 2 cores this process may use (its CPU "
                 "affinity); set at most 2, or 0 for cores / local workers");
  }
  EXPECT_THROW(intraOpThreads(intraOpThreads(0, 1) + 1, 1), cumulus::UserError);
}

}  // namespace
}  // namespace cumulus::trainer
