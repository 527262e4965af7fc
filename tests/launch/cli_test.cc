// launch/'s programs as a user runs them: cumulus-run, cumulus-spot and cumulus-allreduce-probe
// share one command line (base/command_line.h), so a malformed number exits 2 naming the flag
// and --help prints on stdout and exits 0.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

Outcome run(const std::string& program, const std::string& args) {
  const std::string err_path =
      ::testing::TempDir() + "/launch_cli_test_" + std::to_string(::getpid()) + ".err";
  const std::string command =
      std::string(CUMULUS_BINARY_DIR) + "/bin/" + program + " " + args + " 2>" + err_path;
  Outcome o;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return o;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) o.out.append(chunk, n);
  const int status = ::pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  o.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());
  return o;
}

TEST(LaunchCli, CumulusRunRejectsAMalformedNumberAndHelpsOnStdout) {
  Outcome o = run("cumulus-run", "--max-restarts 2x -- /bin/true");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-run: error: --max-restarts: expected an integer in [0, 1000000], got "
            "\"2x\"\n");
  EXPECT_EQ(o.out, "");
  o = run("cumulus-run", "--help");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("Usage: cumulus-run [FLAGS] [PROGRAM...]\n"), std::string::npos) << o.out;
}

TEST(LaunchCli, CumulusSpotRejectsAMalformedNumberAndHelpsOnStdout) {
  Outcome o = run("cumulus-spot", "--max-crashes 2x -- /bin/true");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-spot: error: --max-crashes: expected an integer in [0, 1000000000], got "
            "\"2x\"\n");
  EXPECT_EQ(o.out, "");
  o = run("cumulus-spot", "--notice= -- /bin/true");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "cumulus-spot: error: --notice: the value is empty; give --notice S\n");
  o = run("cumulus-spot", "--help");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("Usage: cumulus-spot [FLAGS] [COMMAND...]\n"), std::string::npos) << o.out;
}

TEST(LaunchCli, CumulusAllreduceProbeRejectsAMalformedNumberAndHelpsOnStdout) {
  Outcome o = run("cumulus-allreduce-probe", "--max-iters 2x");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-allreduce-probe: error: --max-iters: expected an integer in [1, 1000000], "
            "got \"2x\"\n");
  o = run("cumulus-allreduce-probe", "--sizes 4096,1e3");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-allreduce-probe: error: --sizes: expected an integer in [4, 1099511627776], "
            "got \"1e3\"\n");
  o = run("cumulus-allreduce-probe", "--help");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("Usage: cumulus-allreduce-probe [FLAGS]\n"), std::string::npos) << o.out;
}

}  // namespace
