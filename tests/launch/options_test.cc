#include "launch/options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "launch/experiment_launch.h"

namespace cumulus::launch {
namespace {

std::string usageErrorOf(const std::vector<std::string>& args) {
  try {
    parseLaunchArgs(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

// The UsageError of parsing `args` and applying the experiment's launch: section, where the
// checks that need the whole job (node rank, --min-workers) run.
std::string launchErrorOf(const std::vector<std::string>& args) {
  try {
    LaunchOptions o = parseLaunchArgs(args);
    applyExperimentLaunchSection(o);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LaunchOptions, TorchrunStyleFlagsAndProgram) {
  auto o = parseLaunchArgs({"--nproc-per-node", "4", "--nnodes=2", "--node_rank", "1",
                            "--rdzv-endpoint", "10.0.0.1:29500", "--max-restarts=5",
                            "--monitor-interval", "0.5", "--run-id", "job7", "--log-dir", "/tmp/l",
                            "--", "cumulus-train", "configs/x.yaml", "--set", "a=b"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.rdzv_host, "10.0.0.1");
  EXPECT_EQ(o.rdzv_port, 29500);
  EXPECT_EQ(o.max_restarts, 5);
  EXPECT_DOUBLE_EQ(o.monitor_interval, 0.5);
  EXPECT_EQ(o.run_id, "job7");
  EXPECT_EQ(o.log_dir, "/tmp/l");
  EXPECT_EQ(o.command,
            (std::vector<std::string>{"cumulus-train", "configs/x.yaml", "--set", "a=b"}));
  EXPECT_TRUE(o.explicit_flags.count("nproc-per-node"));
  EXPECT_FALSE(o.explicit_flags.count("standalone"));
}

TEST(LaunchOptions, ProgramWithoutDoubleDash) {
  auto o = parseLaunchArgs({"--standalone", "python3", "--version"});
  EXPECT_TRUE(o.standalone);
  EXPECT_EQ(o.command, (std::vector<std::string>{"python3", "--version"}));
}

TEST(LaunchOptions, ElasticRangeAndIpv6Endpoint) {
  auto o = parseLaunchArgs({"--nnodes", "2:4", "--rdzv-endpoint", "[::1]:1234", "--", "x"});
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 4);
  EXPECT_EQ(o.rdzv_host, "::1");
  EXPECT_EQ(o.rdzv_port, 1234);
  EXPECT_DOUBLE_EQ(o.rdzv_last_call, 3.0);
  o = parseLaunchArgs({"--nnodes=1:3", "--node-rank", "2", "--rdzv-endpoint", "h:1",
                       "--rdzv-last-call", "0.5", "--", "x"});
  EXPECT_EQ(o.min_nodes, 1);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_DOUBLE_EQ(o.rdzv_last_call, 0.5);
  EXPECT_EQ(
      usageErrorOf({"--nnodes", "2:3", "--node-rank", "3", "--rdzv-endpoint", "h:1", "--", "x"}),
      "--node-rank 3 is out of range for --nnodes 2:3 (node ids are 0 … MAX-1, one per node)");
  EXPECT_EQ(usageErrorOf({"--rdzv-last-call", "-1", "--", "x"}),
            "--rdzv-last-call: expected seconds in [0, 86400], got \"-1\"");
}

// --min-workers: the CUMULUS_MIN_WORKERS the launcher hands an in-place group, checked once the
// experiment's launch: section applied (it may set the node count and the recovery).
TEST(LaunchOptions, MinWorkersDefaultsToTheMinNodesWorkersAndIsChecked) {
  auto checked = [](const std::vector<std::string>& args) {
    LaunchOptions o = parseLaunchArgs(args);
    applyExperimentLaunchSection(o);
    return o;
  };
  LaunchOptions o = checked({"--nproc-per-node", "4", "--", "x"});
  EXPECT_EQ(o.min_workers, 0);
  EXPECT_EQ(minWorkers(o), 4);
  o = checked({"--nproc-per-node", "4", "--min-workers", "1", "--", "x"});
  EXPECT_EQ(minWorkers(o), 1);
  o = checked({"--nproc-per-node", "2", "--nnodes", "2:3", "--rdzv-endpoint", "h:1", "--", "x"});
  EXPECT_EQ(minWorkers(o), 4);
  EXPECT_EQ(launchErrorOf({"--nproc-per-node", "2", "--min-workers", "3", "--", "x"}),
            "--min-workers 3 is more than the job's 2 worker(s) (--nnodes 1 × --nproc-per-node 2)");
  EXPECT_EQ(launchErrorOf({"--nproc-per-node", "2", "--min-workers", "1", "--recovery", "restart",
                           "--", "x"}),
            "--min-workers needs --recovery in_place: with restart, a notice or a failure stops "
            "every worker");
  EXPECT_EQ(usageErrorOf({"--min-workers", "0", "--", "x"}),
            "--min-workers: expected an integer in [1, 1048576], got \"0\"");
}

TEST(LaunchOptions, ErrorsNameTheFlag) {
  EXPECT_EQ(usageErrorOf({"--nproc-per-node", "0", "--", "x"}),
            "--nproc-per-node: expected an integer in [1, 1024], got \"0\"");
  EXPECT_EQ(usageErrorOf({"--nprocs", "2", "--", "x"}),
            "unknown flag --nprocs (see cumulus-run --help)");
  EXPECT_EQ(usageErrorOf({"--nnodes", "3:2", "--", "x"}),
            "--nnodes: MIN:MAX needs MIN <= MAX, got \"3:2\"");
  EXPECT_EQ(usageErrorOf({"--rdzv-endpoint", "localhost", "--", "x"}),
            "--rdzv-endpoint: expected HOST:PORT, got \"localhost\"");
  EXPECT_EQ(usageErrorOf({"--rdzv-endpoint", "h:99999", "--", "x"}),
            "--rdzv-endpoint: expected an integer in [1, 65535], got \"99999\"");
  EXPECT_EQ(usageErrorOf({"--nproc-per-node"}), "--nproc-per-node: 1 required N missing");
  EXPECT_EQ(usageErrorOf({"--nproc-per-node", "2"}),
            "no program to run: cumulus-run [flags] -- PROGRAM [ARGS...]");
  EXPECT_EQ(
      usageErrorOf({"--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1", "--", "x"}),
      "--node-rank 2 is out of range for --nnodes 2 (ranks are 0 … nnodes-1)");
  EXPECT_EQ(usageErrorOf({"--nnodes", "2", "--", "x"}),
            "--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address)");
  EXPECT_EQ(usageErrorOf({"--standalone", "--nnodes", "2", "--", "x"}),
            "--standalone runs one node with its own Store; drop --nnodes/--rdzv-endpoint");
  EXPECT_EQ(usageErrorOf({"--monitor-interval", "fast", "--", "x"}),
            "--monitor-interval: expected seconds in [0.001, 86400], got \"fast\"");
}

TEST(LaunchOptions, NumbersAreWholeDecimalAndInRange) {
  EXPECT_EQ(usageErrorOf({"--nproc-per-node", "2x", "--", "x"}),
            "--nproc-per-node: expected an integer in [1, 1024], got \"2x\"");
  EXPECT_EQ(usageErrorOf({"--nproc-per-node=", "--", "x"}),
            "--nproc-per-node: the value is empty; give --nproc-per-node N");
  EXPECT_EQ(usageErrorOf({"--nproc-per-node", "", "--", "x"}),
            "--nproc-per-node: expected an integer in [1, 1024], got \"\"");
  EXPECT_EQ(usageErrorOf({"--max-restarts", "-1", "--", "x"}),
            "--max-restarts: expected an integer in [0, 1000000], got \"-1\"");
  EXPECT_EQ(usageErrorOf({"--max-restarts", "1e99", "--", "x"}),
            "--max-restarts: expected an integer in [0, 1000000], got \"1e99\"");
  EXPECT_EQ(usageErrorOf({"--nnodes", "2x", "--", "x"}),
            "--nnodes: expected an integer in [1, 4096], got \"2x\"");
  EXPECT_EQ(usageErrorOf({"--stop-grace", "1s", "--", "x"}),
            "--stop-grace: expected seconds in [0, 86400], got \"1s\"");
  EXPECT_EQ(usageErrorOf({"--standalone=yes", "--", "x"}), "--standalone takes no value");
  EXPECT_EQ(parseLaunchArgs({"--nproc-per-node", "010", "--", "x"}).nproc_per_node, 10);
  // The program's own flags are the program's.
  EXPECT_EQ(parseLaunchArgs({"--standalone", "x", "--standalone=1", "--log-dir="}).command,
            (std::vector<std::string>{"x", "--standalone=1", "--log-dir="}));
}

TEST(LaunchOptions, UnderscoresAreDashesInTheFlagsOnly) {
  auto o = parseLaunchArgs({"--nproc_per_node=2", "--log_dir", "/tmp/l", "--standalone", "prog",
                            "--some_flag", "--max_restarts=1"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.log_dir, "/tmp/l");
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.command, (std::vector<std::string>{"prog", "--some_flag", "--max_restarts=1"}));
  EXPECT_TRUE(o.explicit_flags.count("log-dir"));
}

TEST(LaunchOptions, HelpPrintsTheFlagsAndChecksNothingElse) {
  std::ostringstream help;
  const LaunchOptions o = parseLaunchArgs({"--nnodes", "2", "--help"}, help);
  EXPECT_TRUE(o.help);
  EXPECT_NE(help.str().find("Usage: cumulus-run [FLAGS] [PROGRAM...]\n"), std::string::npos)
      << help.str();
  EXPECT_NE(help.str().find("  --nproc-per-node N          workers on this node\n"),
            std::string::npos)
      << help.str();
  EXPECT_FALSE(parseLaunchArgs({"--", "x"}).help);
}

TEST(LaunchOptions, AnElasticRangeInTheExperimentAppliesAndNeedsAnEndpoint) {
  const std::filesystem::path yaml =
      std::filesystem::temp_directory_path() / ("elastic-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(yaml) << "name: e\nlaunch:\n  nnodes: \"2:3\"\n  rdzv_endpoint: h:7\n"
                      << "  rdzv_timeout: 90\n  rdzv_last_call: 0.5\n";
  LaunchOptions o = parseLaunchArgs({"--node-rank", "2", "--", "w", yaml.string()});
  applyExperimentLaunchSection(o);
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 3);
  EXPECT_EQ(o.rdzv_host, "h");
  EXPECT_DOUBLE_EQ(o.rdzv_timeout, 90);
  EXPECT_DOUBLE_EQ(o.rdzv_last_call, 0.5);
  // A flag wins over the experiment.
  o = parseLaunchArgs({"--node-rank", "2", "--rdzv-last-call", "7", "--", "w", yaml.string()});
  applyExperimentLaunchSection(o);
  EXPECT_DOUBLE_EQ(o.rdzv_last_call, 7);
  EXPECT_DOUBLE_EQ(o.rdzv_timeout, 90);
  std::ofstream(yaml) << "name: e\nlaunch:\n  nnodes: \"2:3\"\n";
  EXPECT_EQ(launchErrorOf({"--", "w", yaml.string()}),
            "launch.nnodes \"2:3\" in " + yaml.string() +
                " needs node 0's address: --rdzv-endpoint HOST:PORT or launch.rdzv_endpoint");
  std::filesystem::remove(yaml);
}

TEST(LaunchOptions, RecoveryFromTheFlagOrTheExperimentFlagWinning) {
  EXPECT_EQ(parseLaunchArgs({"--", "w"}).recovery, kDefaultRecovery);
  EXPECT_EQ(parseLaunchArgs({"--recovery", "in_place", "--", "w"}).recovery, Recovery::kInPlace);
  EXPECT_EQ(parseLaunchArgs({"--recovery=restart", "--", "w"}).recovery, Recovery::kRestart);
  EXPECT_EQ(usageErrorOf({"--recovery", "bogus", "--", "w"}),
            "--recovery: must be in_place or restart, got 'bogus'");
  EXPECT_STREQ(recoveryName(Recovery::kInPlace), "in_place");
  EXPECT_STREQ(recoveryName(Recovery::kRestart), "restart");

  const std::filesystem::path yaml =
      std::filesystem::temp_directory_path() / ("recovery-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(yaml) << "name: e\nlaunch:\n  recovery: in_place\n";
  LaunchOptions o = parseLaunchArgs({"--", "w", yaml.string()});
  applyExperimentLaunchSection(o);
  EXPECT_EQ(o.recovery, Recovery::kInPlace);
  o = parseLaunchArgs({"--recovery", "restart", "--", "w", yaml.string()});
  applyExperimentLaunchSection(o);
  EXPECT_EQ(o.recovery, Recovery::kRestart);
  std::filesystem::remove(yaml);
}

TEST(LaunchOptions, MinWorkersFromTheExperimentTheFlagWinning) {
  const std::filesystem::path yaml = std::filesystem::temp_directory_path() /
                                     ("min-workers-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(yaml) << "name: e\nlaunch:\n  nproc_per_node: 4\n  min_workers: 2\n";
  LaunchOptions o = parseLaunchArgs({"--", "w", yaml.string()});
  applyExperimentLaunchSection(o);
  EXPECT_EQ(minWorkers(o), 2);
  o = parseLaunchArgs({"--min-workers", "3", "--", "w", yaml.string()});
  applyExperimentLaunchSection(o);
  EXPECT_EQ(minWorkers(o), 3);
  std::ofstream(yaml) << "name: e\nlaunch:\n  nproc_per_node: 4\n  min_workers: 5\n";
  EXPECT_EQ(launchErrorOf({"--", "w", yaml.string()}),
            "launch.min_workers 5 in " + yaml.string() +
                " is more than the job's 4 worker(s) (--nnodes 1 × --nproc-per-node 4)");
  std::filesystem::remove(yaml);
}

TEST(LaunchOptions, BindHostAndParameterServerFlags) {
  auto o = parseLaunchArgs({"--bind-host", "10.231.0.2", "--parameter-server", "--", "w"});
  EXPECT_EQ(o.bind_host, "10.231.0.2");
  EXPECT_TRUE(o.host_parameter_server);
  EXPECT_TRUE(parseLaunchArgs({"w"}).bind_host.empty());
  EXPECT_FALSE(parseLaunchArgs({"w"}).host_parameter_server);
  try {
    parseLaunchArgs({"--parameter-server=1", "w"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--parameter-server takes no value");
  }
  try {
    parseLaunchArgs({"--bind-host=", "w"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--bind-host: the value is empty; give --bind-host H");
  }
}

}  // namespace
}  // namespace cumulus::launch
