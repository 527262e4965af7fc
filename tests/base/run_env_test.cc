#include "base/run_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

namespace cumulus::base {
namespace {

EnvLookup lookupIn(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string errorOf(const std::map<std::string, std::string>& vars) {
  try {
    RunEnv::fromEnvironment(lookupIn(vars));
  } catch (const EnvError& e) {
    EXPECT_EQ(exitCodeFor(e), kUserErrorExitCode);
    return e.what();
  }
  return "(no error)";
}

TEST(RunEnvTest, NothingSetIsRankZeroOfOne) {
  const RunEnv env = RunEnv::fromEnvironment(lookupIn({}));
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.store_port, 0);
  EXPECT_EQ(env.store_host, "");
  EXPECT_EQ(env.job_token, "");
}

TEST(RunEnvTest, ReadsEveryVariable) {
  const RunEnv env = RunEnv::fromEnvironment(lookupIn({{"RANK", "3"},
                                                       {"WORLD_SIZE", "4"},
                                                       {"LOCAL_RANK", "1"},
                                                       {"LOCAL_WORLD_SIZE", "2"},
                                                       {"GROUP_RANK", "1"},
                                                       {"MASTER_ADDR", "10.0.0.1"},
                                                       {"MASTER_PORT", "29500"},
                                                       {"CUMULUS_RUN_ID", "r7"},
                                                       {"CUMULUS_RESTART_COUNT", "2"},
                                                       {"CUMULUS_GENERATION", "5"},
                                                       {"CUMULUS_JOB_TOKEN", "secret"},
                                                       {"CUMULUS_PS_ENDPOINT", "h:9"},
                                                       {"CUMULUS_LOG_DIR", "/tmp/l"},
                                                       {"CUMULUS_BIND_HOST", "0.0.0.0"}}));
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.group_rank, 1);
  EXPECT_EQ(env.store_host, "10.0.0.1");
  EXPECT_EQ(env.store_port, 29500);
  EXPECT_EQ(env.run_id, "r7");
  EXPECT_EQ(env.restart_count, 2);
  EXPECT_EQ(env.generation, 5);
  EXPECT_EQ(env.job_token, "secret");
  EXPECT_EQ(env.ps_endpoint, "h:9");
  EXPECT_EQ(env.log_dir, "/tmp/l");
  EXPECT_EQ(env.bind_host, "0.0.0.0");
}

// Under torchrun each restart of the group is a generation of its own; cumulus-run's own
// variables, when set, win.
TEST(RunEnvTest, TorchrunsRestartCountIsTheGenerationWhenCumulusSetsNone) {
  const RunEnv torchrun = RunEnv::fromEnvironment(lookupIn({{"TORCHELASTIC_RESTART_COUNT", "3"}}));
  EXPECT_EQ(torchrun.generation, 3);
  EXPECT_EQ(torchrun.restart_count, 3);
  const RunEnv both = RunEnv::fromEnvironment(lookupIn({{"TORCHELASTIC_RESTART_COUNT", "3"},
                                                        {"CUMULUS_GENERATION", "7"},
                                                        {"CUMULUS_RESTART_COUNT", "1"}}));
  EXPECT_EQ(both.generation, 7);
  EXPECT_EQ(both.restart_count, 1);
  EXPECT_EQ(errorOf({{"TORCHELASTIC_RESTART_COUNT", "-1"}}),
            "TORCHELASTIC_RESTART_COUNT=-1 must be >= 0");
}

// What torch's own distributed tests do: WORLD_SIZE in the environment, the rank passed to
// init_process_group. A reader that is given its rank sees none of the job's placement.
TEST(RunEnvTest, TheMemberEnvironmentHidesTheJobsPlacement) {
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("CUMULUS_RUN_ID", "member-env-test", 1);
  ::unsetenv("RANK");
  EXPECT_EQ(memberEnvironment("WORLD_SIZE"), nullptr);
  EXPECT_EQ(memberEnvironment("LOCAL_WORLD_SIZE"), nullptr);
  EXPECT_STREQ(memberEnvironment("CUMULUS_RUN_ID"), "member-env-test");
  EXPECT_THROW(RunEnv::fromEnvironment(), EnvError);
  const RunEnv env = RunEnv::fromEnvironment(memberEnvironment);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.run_id, "member-env-test");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("LOCAL_WORLD_SIZE");
  ::unsetenv("CUMULUS_RUN_ID");
}

TEST(RunEnvTest, ErrorsNameTheVariable) {
  // A worker meant for a group must not train alone because half of its environment is missing.
  EXPECT_EQ(errorOf({{"RANK", "0"}}),
            "RANK=0 is set but WORLD_SIZE is not: a worker of a group needs both (cumulus-run "
            "sets them); unset RANK to train alone");
  // Empty counts as unset, as for every other variable.
  EXPECT_EQ(errorOf({{"RANK", ""}}), "(no error)");
  EXPECT_EQ(errorOf({{"RANK", "1"}}),
            "RANK=1 is set but WORLD_SIZE is not: a worker of a group needs both (cumulus-run "
            "sets them); unset RANK to train alone");
  EXPECT_EQ(errorOf({{"WORLD_SIZE", "2"}}),
            "WORLD_SIZE=2 is set but RANK is not: a worker of a group needs both (cumulus-run "
            "sets them); unset WORLD_SIZE to train alone");
  EXPECT_EQ(errorOf({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
            "environment variable RANK=\"x\" is not an integer");
  EXPECT_EQ(errorOf({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "RANK=2 must be in [0, WORLD_SIZE=2)");
  EXPECT_EQ(errorOf({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
            "WORLD_SIZE=0 must be in [1, 2147483647]");
  EXPECT_EQ(errorOf({{"RANK", "0"}, {"WORLD_SIZE", "4294967296"}}),
            "WORLD_SIZE=4294967296 must be in [1, 2147483647]");
  EXPECT_EQ(errorOf({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
            "LOCAL_RANK=2 must be in [0, LOCAL_WORLD_SIZE=2)");
  EXPECT_EQ(errorOf({{"LOCAL_WORLD_SIZE", "0"}}), "LOCAL_WORLD_SIZE=0 must be in [1, 2147483647]");
  EXPECT_EQ(errorOf({{"MASTER_PORT", "70000"}}), "MASTER_PORT=70000 must be in [0, 65535]");
  EXPECT_EQ(errorOf({{"CUMULUS_GENERATION", "-1"}}), "CUMULUS_GENERATION=-1 must be >= 0");
  EXPECT_EQ(errorOf({{"CUMULUS_RESTART_COUNT", "-3"}}), "CUMULUS_RESTART_COUNT=-3 must be >= 0");
}

TEST(RunEnvTest, AGroupMemberNeedsTheGroupVariables) {
  const std::map<std::string, std::string> group = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
  const RunEnv env = RunEnv::fromGroupEnvironment(lookupIn(group), "start it with cumulus-run");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.store_port, 29500);
  auto errorWith = [&](const std::string& name, const char* value) -> std::string {
    auto vars = group;
    if (value == nullptr) {
      vars.erase(name);
    } else {
      vars[name] = value;
    }
    try {
      RunEnv::fromGroupEnvironment(lookupIn(vars), "start it with cumulus-run");
    } catch (const EnvError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(errorWith("MASTER_ADDR", nullptr), "MASTER_ADDR is not set: start it with cumulus-run");
  EXPECT_EQ(errorWith("RANK", ""), "RANK is not set: start it with cumulus-run");
  EXPECT_EQ(errorWith("MASTER_PORT", "0"), "MASTER_PORT=0 must be in [1, 65535]");
  EXPECT_EQ(errorWith("MASTER_PORT", "70000"), "MASTER_PORT=70000 must be in [1, 65535]");
  EXPECT_EQ(errorWith("RANK", "5"), "RANK=5 must be in [0, WORLD_SIZE=2)");
}

TEST(DataPlaneEnvTest, ReadsTheTransportAndTheSpinOrNothing) {
  DataPlaneEnv none = DataPlaneEnv::fromEnvironment(lookupIn({{"CUMULUS_TRANSPORT", ""}}));
  EXPECT_EQ(none.transport, std::nullopt);
  EXPECT_EQ(none.spin_microseconds, std::nullopt);
  const DataPlaneEnv set = DataPlaneEnv::fromEnvironment(
      lookupIn({{"CUMULUS_TRANSPORT", "shm"}, {"CUMULUS_SPIN_US", "20"}}));
  EXPECT_EQ(set.transport, "shm");  // comm checks the name
  EXPECT_EQ(set.spin_microseconds, 20);
  for (const char* bad : {"fast", "-1", "1000001", "20us"}) {
    try {
      DataPlaneEnv::fromEnvironment(lookupIn({{"CUMULUS_SPIN_US", bad}}));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const EnvError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("CUMULUS_SPIN_US (microseconds): expected an integer in [0, 1000000], "
                            "got \"") +
                    bad + "\"");
    }
  }
}

}  // namespace
}  // namespace cumulus::base
