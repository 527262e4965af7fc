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
  int exitCode = -1;
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
  run.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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
  ASSERT_EQ(run.exitCode, 0) << run.output;
  EXPECT_NE(run.output.find("# cumulus-bench allreduce: algo ring, world 3, dtype float32"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(countLines(run.output, "{\"bench\":\"allreduce\",\"impl\":\"cumulus\",\"algo\":\"ring\","
                                   "\"ran\":\"ring\",\"world\":3,"),
            3)
      << run.output;
  for (const char* bytes : {"\"bytes\":4096,", "\"bytes\":16384,", "\"bytes\":65536,"})
    EXPECT_NE(run.output.find(bytes), std::string::npos) << bytes << "\n" << run.output;
}

TEST(CumulusBench, CalibrateWritesAModelWithTheOversubscribedTerms) {
  const std::string path = ::testing::TempDir() + "/bench_cli_cost_model.json";
  std::remove(path.c_str());
  const BenchRun run = runBench("calibrate --sizes 64K:256K --oversubscribed-world 3 --out " + path);
  ASSERT_EQ(run.exitCode, 0) << run.output;
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
  EXPECT_EQ(world.exitCode, 2);
  EXPECT_NE(world.output.find(
                "cumulus-bench: --oversubscribed-world must be 0 (skip) or in [2, 64], got 1"),
            std::string::npos)
      << world.output;
  const BenchRun sizes = runBench("allreduce --sizes 64K:4K");
  EXPECT_EQ(sizes.exitCode, 2);
  EXPECT_NE(sizes.output.find("--sizes wants MIN:MAX with 0 < MIN <= MAX, got '64K:4K'"),
            std::string::npos)
      << sizes.output;
}

}  // namespace
}  // namespace cumulus::comm
