#include "launch/slurm_env.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "launch/experiment_launch.h"

namespace cumulus::launch {
namespace {

using Env = std::map<std::string, std::string>;

std::function<const char*(const char*)> lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

std::string usageErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LaunchSlurm, ExpandsHostlistsKeepingZeroPadding) {
  EXPECT_EQ(expandSlurmNodelist("node[01-03],gpu5"),
            (std::vector<std::string>{"node01", "node02", "node03", "gpu5"}));
  EXPECT_EQ(expandSlurmNodelist("a[8-10,12]-ib,b"),
            (std::vector<std::string>{"a8-ib", "a9-ib", "a10-ib", "a12-ib", "b"}));
  EXPECT_EQ(expandSlurmNodelist("c[098-101]"),
            (std::vector<std::string>{"c098", "c099", "c100", "c101"}));
  EXPECT_EQ(expandSlurmNodelist("solo"), (std::vector<std::string>{"solo"}));
  EXPECT_EQ(usageErrorOf([] { expandSlurmNodelist("node[01-03"); }),
            "SLURM_JOB_NODELIST=\"node[01-03\": unbalanced brackets");
  EXPECT_EQ(usageErrorOf([] { expandSlurmNodelist("node[5-3]"); }),
            "SLURM_JOB_NODELIST range: expected an integer in [5, 999999999], got \"3\"");
}

TEST(LaunchSlurm, AllocationFillsNodesRankEndpointAndRunId) {
  const Env env = {{"SLURM_JOB_ID", "4711"},
                   {"SLURM_NNODES", "3"},
                   {"SLURM_NODEID", "2"},
                   {"SLURM_JOB_NODELIST", "node[01-03],gpu5"}};
  LaunchOptions o = parseLaunchArgs({"--", "cumulus-train", "x.yaml"});
  ASSERT_TRUE(applySlurmEnvironment(o, lookup(env)));
  EXPECT_EQ(o.min_nodes, 3);
  EXPECT_EQ(o.max_nodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.rdzv_host, "node01");
  EXPECT_EQ(o.rdzv_port, kSlurmRdzvPort);
  EXPECT_EQ(o.run_id, "slurm-4711");
  EXPECT_TRUE(o.explicit_flags.count("nnodes"));  // so the YAML's launch: section cannot undo it
  EXPECT_TRUE(o.explicit_flags.count("rdzv-endpoint"));
}

TEST(LaunchSlurm, FlagsWinAndPortComesFromTheEnvironment) {
  const Env env = {{"SLURM_JOB_ID", "9"},
                   {"SLURM_JOB_NUM_NODES", "2"},
                   {"SLURM_NODEID", "1"},
                   {"SLURM_NODELIST", "n[7-8]"},
                   {"CUMULUS_RDZV_PORT", "31000"}};
  LaunchOptions o = parseLaunchArgs({"--run-id", "mine", "--", "w"});
  ASSERT_TRUE(applySlurmEnvironment(o, lookup(env)));
  EXPECT_EQ(o.run_id, "mine");
  EXPECT_EQ(o.rdzv_host, "n7");
  EXPECT_EQ(o.rdzv_port, 31000);
  EXPECT_EQ(o.node_rank, 1);

  LaunchOptions f = parseLaunchArgs(
      {"--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "10.1.1.1:5000", "--", "w"});
  ASSERT_TRUE(applySlurmEnvironment(f, lookup(env)));
  EXPECT_EQ(f.node_rank, 0);
  EXPECT_EQ(f.rdzv_host, "10.1.1.1");
  EXPECT_EQ(f.rdzv_port, 5000);
}

TEST(LaunchSlurm, OutsideSlurmNothingChangesAndBadValuesAreNamed) {
  LaunchOptions o = parseLaunchArgs({"w"});
  EXPECT_FALSE(applySlurmEnvironment(o, lookup({})));
  EXPECT_EQ(o.max_nodes, 1);
  EXPECT_TRUE(o.run_id.empty());
  const Env bad = {{"SLURM_JOB_ID", "1"},
                   {"SLURM_NNODES", "2"},
                   {"SLURM_NODEID", "2"},
                   {"SLURM_JOB_NODELIST", "a[1-2]"}};
  EXPECT_EQ(usageErrorOf([&] { applySlurmEnvironment(o, lookup(bad)); }),
            "SLURM_NODEID=2 is out of range for 2 node(s) (SLURM_NNODES)");
  const Env junk = {{"SLURM_JOB_ID", "1"}, {"SLURM_NNODES", "two"}};
  LaunchOptions p = parseLaunchArgs({"w"});
  EXPECT_EQ(usageErrorOf([&] { applySlurmEnvironment(p, lookup(junk)); }),
            "SLURM_NNODES: expected an integer in [1, 4096], got \"two\"");
}

TEST(LaunchSlurm, TheAllocationIsMaxAndAnElasticExperimentKeepsItsMin) {
  const std::filesystem::path yaml = std::filesystem::temp_directory_path() /
                                     ("slurm-elastic-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(yaml) << "name: e\nlaunch:\n  nnodes: \"2:8\"\n";
  const Env env = {{"SLURM_JOB_ID", "5"},
                   {"SLURM_NNODES", "4"},
                   {"SLURM_NODEID", "3"},
                   {"SLURM_JOB_NODELIST", "n[1-4]"}};
  LaunchOptions o = parseLaunchArgs({"--", "cumulus-train", yaml.string()});
  ASSERT_TRUE(applySlurmEnvironment(o, lookup(env)));
  applyExperimentLaunchSection(o);
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 4);
  EXPECT_EQ(o.node_rank, 3);
  // A fixed count in the experiment changes nothing; a flag wins over both.
  std::ofstream(yaml) << "name: e\nlaunch:\n  nnodes: \"2\"\n";
  o = parseLaunchArgs({"--", "cumulus-train", yaml.string()});
  applySlurmEnvironment(o, lookup(env));
  applyExperimentLaunchSection(o);
  EXPECT_EQ(o.min_nodes, 4);
  EXPECT_EQ(o.max_nodes, 4);
  o = parseLaunchArgs(
      {"--nnodes", "3:6", "--rdzv-endpoint", "h:1", "--", "cumulus-train", yaml.string()});
  applySlurmEnvironment(o, lookup(env));
  applyExperimentLaunchSection(o);
  EXPECT_EQ(o.min_nodes, 3);
  EXPECT_EQ(o.max_nodes, 6);
  std::filesystem::remove(yaml);
}

}  // namespace
}  // namespace cumulus::launch
