#include "trainer/run_env.h"

#include <gtest/gtest.h>

#include <map>

namespace cumulus::trainer {
namespace {

RunEnv fromMap(const std::map<std::string, std::string>& vars) {
  return RunEnv::fromEnvironment([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(RunEnvTest, NoVariablesMeansRankZeroOfOne) {
  const RunEnv env = fromMap({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "");
}

TEST(RunEnvTest, ReadsTheTorchrunVariables) {
  const RunEnv env = fromMap({{"RANK", "3"},
                              {"LOCAL_RANK", "1"},
                              {"WORLD_SIZE", "4"},
                              {"LOCAL_WORLD_SIZE", "2"},
                              {"GROUP_RANK", "1"},
                              {"MASTER_ADDR", "10.0.0.1"},
                              {"MASTER_PORT", "29500"},
                              {"CUMULUS_RUN_ID", "job7"},
                              {"CUMULUS_RESTART_COUNT", "2"},
                              {"CUMULUS_GENERATION", "5"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.group_rank, 1);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.run_id, "job7");
  EXPECT_EQ(env.restart_count, 2);
  EXPECT_EQ(env.generation, 5);
}

TEST(RunEnvTest, RejectsMalformedAndOutOfRangeValues) {
  try {
    fromMap({{"WORLD_SIZE", "two"}, {"RANK", "0"}});
    FAIL() << "expected an exception";
  } catch (const EnvError& e) {
    EXPECT_STREQ(e.what(), "environment variable WORLD_SIZE=\"two\" is not an integer");
  }
  try {
    fromMap({{"WORLD_SIZE", "2"}, {"RANK", "2"}});
    FAIL() << "expected an exception";
  } catch (const EnvError& e) {
    EXPECT_STREQ(e.what(), "RANK=2 must be in [0, WORLD_SIZE=2)");
  }
  EXPECT_THROW(fromMap({{"WORLD_SIZE", "0"}, {"RANK", "0"}}), EnvError);
  EXPECT_THROW(fromMap({{"LOCAL_RANK", "1"}}), EnvError);
  EXPECT_THROW(fromMap({{"MASTER_PORT", "70000"}}), EnvError);
  EXPECT_THROW(fromMap({{"RANK", "1x"}, {"WORLD_SIZE", "2"}}), EnvError);
}

// A worker meant for a group must not train alone because half of its environment is missing.
TEST(RunEnvTest, RankAndWorldSizeComeTogether) {
  try {
    fromMap({{"RANK", "0"}});
    FAIL() << "expected an exception";
  } catch (const EnvError& e) {
    EXPECT_STREQ(e.what(),
                 "RANK=0 is set but WORLD_SIZE is not: a worker of a group needs both (cumulus-run "
                 "sets them); unset RANK to train alone");
  }
  try {
    fromMap({{"RANK", "1"}});
    FAIL() << "expected an exception";
  } catch (const EnvError& e) {
    EXPECT_STREQ(e.what(),
                 "RANK=1 is set but WORLD_SIZE is not: a worker of a group needs both (cumulus-run "
                 "sets them); unset RANK to train alone");
  }
  try {
    fromMap({{"WORLD_SIZE", "2"}});
    FAIL() << "expected an exception";
  } catch (const EnvError& e) {
    EXPECT_STREQ(e.what(),
                 "WORLD_SIZE=2 is set but RANK is not: a worker of a group needs both (cumulus-run "
                 "sets them); unset WORLD_SIZE to train alone");
  }
  // Empty counts as unset, as for every other variable.
  EXPECT_EQ(fromMap({{"RANK", ""}}).world_size, 1);
}

TEST(RunEnvTest, ThreadsComeFromConfigOrCoresPerLocalWorker) {
  EXPECT_EQ(intraOpThreads(3, 8), 3);
  const int64_t all = intraOpThreads(0, 1);
  EXPECT_GE(all, 1);
  EXPECT_EQ(intraOpThreads(0, 2), std::max<int64_t>(1, all / 2));
  EXPECT_EQ(intraOpThreads(0, 1000000), 1);
}

}  // namespace
}  // namespace cumulus::trainer
