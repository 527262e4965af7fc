// cumulus-bench as a user runs it: real rank processes on loopback, a real Store and parameter
// server. Small sizes keep each run to a few seconds.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "comm/cost_model.h"

namespace cumulus::comm {
namespace {

struct BenchRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

BenchRun runBench(const std::string& args) {
  const std::string binary = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-bench";
  EXPECT_EQ(access(binary.c_str(), X_OK), 0) << binary << " is missing: build cumulus-bench";
  BenchRun run;
  FILE* pipe = popen((binary + " " + args + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char chunk[4096];
  size_t got = 0;
  while ((got = fread(chunk, 1, sizeof chunk, pipe)) > 0) run.output.append(chunk, got);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

int countLines(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(CumulusBench, AllreducePrintsOneTableRowAndOneJsonLinePerSize) {
  const BenchRun run = runBench("allreduce --algo ring --world-size 3 --sizes 4K:64K --factor 4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("# cumulus-bench allreduce: algo ring, world 3, dtype float32"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(countLines(run.output,
                       "{\"bench\":\"allreduce\",\"impl\":\"cumulus\",\"algo\":\"ring\","
                       "\"ran\":\"ring\",\"world\":3,"),
            3)
      << run.output;
  for (const char* bytes : {"\"bytes\":4096,", "\"bytes\":16384,", "\"bytes\":65536,"})
    EXPECT_NE(run.output.find(bytes), std::string::npos) << bytes << "\n" << run.output;
}

// --hosts gives the ranks distinct host ids: shared memory inside a simulated host, TCP between.
TEST(CumulusBench, HierarchicalRunsOnSimulatedHosts) {
  const BenchRun run =
      runBench("allreduce --algo hierarchical --world-size 4 --hosts 2 --sizes 4K:16K --factor 4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("# 2 simulated hosts x 2 ranks, tcp between hosts\n"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(countLines(run.output,
                       "{\"bench\":\"allreduce\",\"impl\":\"cumulus\",\"algo\":\"hierarchical\","
                       "\"ran\":\"hierarchical\",\"world\":4,"),
            2)
      << run.output;
  const BenchRun uneven = runBench("allreduce --world-size 3 --hosts 2");
  EXPECT_EQ(uneven.exit_code, 2);
  EXPECT_EQ(uneven.output,
            "cumulus-bench: error: --hosts 2 does not divide --world-size 3: give each host the "
            "same number of ranks\n");
}

TEST(CumulusBench, CalibrateWritesAModelWithTheOversubscribedTerms) {
  const std::string path = ::testing::TempDir() + "/bench_cli_cost_model.json";
  std::remove(path.c_str());
  const BenchRun run =
      runBench("calibrate --sizes 64K:256K --oversubscribed-world 3 --out " + path);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("# 3 ranks on "), std::string::npos) << run.output;
  const CostModel model = CostModel::load(path);
  cpu_set_t set;  // calibrate counts the CPUs of its affinity mask
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cores = CPU_COUNT(&set);
  EXPECT_EQ(model.cores(), cores);
  ASSERT_EQ(model.betas().size(), 2u);
  EXPECT_EQ(model.betas()[0].bytes, 65536.0);
  EXPECT_EQ(model.betas()[1].bytes, 262144.0);
  EXPECT_GT(model.alpha(), 0.0);
  if (cores < 3) {  // 3 ranks outnumber the cores: the busy terms are measured
    ASSERT_EQ(model.busy().size(), 2u) << run.output;
    EXPECT_EQ(model.busy()[1].bytes, 262144.0);
    EXPECT_GT(model.busy()[1].ring, 0.0);
    EXPECT_GT(model.alphaBusy(), 0.0);
  } else {
    EXPECT_TRUE(model.busy().empty());
    EXPECT_NE(run.output.find("# no busy_at table: 3 ranks do not outnumber the"),
              std::string::npos)
        << run.output;
  }
  std::remove(path.c_str());
}

TEST(CumulusBench, BadOptionsExitTwoSayingWhich) {
  const BenchRun world = runBench("calibrate --oversubscribed-world 1");
  EXPECT_EQ(world.exit_code, 2);
  EXPECT_EQ(world.output,
            "cumulus-bench: error: --oversubscribed-world: expected 0 (skip) or an integer in "
            "[2, 64], got \"1\"\n");
  const BenchRun sizes = runBench("allreduce --sizes 64K:4K");
  EXPECT_EQ(sizes.exit_code, 2);
  EXPECT_EQ(sizes.output,
            "cumulus-bench: error: --sizes wants MIN:MAX with 0 < MIN <= MAX, got '64K:4K'\n");
}

// Numbers are whole, decimal and in range (base/command_line.h): a trailing letter is no longer
// read as the number before it.
TEST(CumulusBench, MalformedNumbersExitTwoNamingTheFlag) {
  const BenchRun world = runBench("allreduce --world-size 2x");
  EXPECT_EQ(world.exit_code, 2);
  EXPECT_EQ(world.output,
            "cumulus-bench: error: --world-size: expected an integer in [1, 64], got \"2x\"\n");
  const BenchRun empty = runBench("allreduce --iters=");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_EQ(empty.output, "cumulus-bench: error: --iters: the value is empty; give --iters N\n");
  const BenchRun size = runBench("allreduce --sizes 4Kx:64K");
  EXPECT_EQ(size.exit_code, 2);
  EXPECT_EQ(size.output,
            "cumulus-bench: error: --sizes: expected a size such as 4096, 4K, 64M or 1G, got "
            "\"4Kx\"\n");
  const BenchRun algo = runBench("allreduce --algo rng");
  EXPECT_EQ(algo.exit_code, 2);
  EXPECT_EQ(algo.output,
            "cumulus-bench: error: --algo: unknown algorithm 'rng': expected one of funnel, tree, "
            "ring, hierarchical, auto; did you mean 'ring'?\n");
  const BenchRun command = runBench("allredcue");
  EXPECT_EQ(command.exit_code, 2);
  EXPECT_EQ(command.output,
            "cumulus-bench: error: unexpected argument \"allredcue\" (see cumulus-bench --help)\n");
}

TEST(CumulusBench, HelpExitsZeroAndHidesTheWorkerFlags) {
  const BenchRun help = runBench("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("\nUsage: cumulus-bench [FLAGS] SUBCOMMAND\n"), std::string::npos)
      << help.output;
  EXPECT_NE(help.output.find("  allreduce "), std::string::npos) << help.output;
  const BenchRun allreduce = runBench("allreduce --help");
  EXPECT_EQ(allreduce.exit_code, 0);
  EXPECT_NE(allreduce.output.find("  --world-size P              ranks, processes on 127.0.0.1"),
            std::string::npos)
      << allreduce.output;
  EXPECT_EQ(allreduce.output.find("--worker"), std::string::npos) << allreduce.output;
}

}  // namespace
}  // namespace cumulus::comm
