// The cumulus-config binary, run as a user or CI would.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "configs/digest.h"
#include "configs/parse.h"
#include "configs/schema.h"
#include "tests/trainer/process_runner.h"

namespace cumulus::configs {
namespace {

struct Result {
  int status;
  std::string out;  // stdout and stderr together
};

Result run(const std::string& arguments) {
  std::string command =
      std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-config " + arguments + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class ToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cumulus_config_tool_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    for (const std::string& file : files_) std::remove(file.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(ToolTest, CheckPrintsTheResolvedExperiment) {
  std::string path = write("good.yaml", "name: t\noptimizer: {lr: 0.5}\n");
  Result r = run("check " + path + " --set trainer.seed=9");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, toYaml(parseExperiment("name: t\noptimizer: {lr: 0.5}\ntrainer: {seed: 9}\n",
                                          "expected")));
}

TEST_F(ToolTest, CheckReportsTheErrorWithExitStatus2) {
  std::string path = write("bad.yaml", "name: t\ntrainer:\n  lr: 0.1\n");
  Result r = run("check " + path);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "cumulus-config: error: " + path +
                       ":3:3: trainer.lr: unknown key; did you mean `optimizer.lr`?\n");
  Result bad_override = run("check " + write("ok.yaml", "name: t\n") + " --set optimizer.lr=abc");
  EXPECT_EQ(bad_override.status, 2);
  EXPECT_EQ(bad_override.out,
            "cumulus-config: error: --set optimizer.lr=abc: optimizer.lr: expected a number > 0, "
            "got \"abc\"\n");
  Result missing = run("check");
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.out, "cumulus-config: error: FILE is required (see cumulus-config --help)\n");
  EXPECT_EQ(run("frobnicate").status, 2);
}

// What cumulus-train refuses, check refuses with the same words (tests/trainer/cli_test.cc): 2^63 -
// 1 synthetic samples used to pass here and make cumulus-train say "size must be positive, got
// -9223372036854775297".
TEST_F(ToolTest, CheckRefusesASizeBeyondItsCapNamingTheKeyAndTheRange) {
  Result r = run("check " + write("ok.yaml", "name: t\n") +
                 " --set data.synthetic_train_samples=9223372036854775807");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out,
            "cumulus-config: error: --set data.synthetic_train_samples=9223372036854775807: "
            "data.synthetic_train_samples: expected an integer in [1, 1000000000], got "
            "9223372036854775807\n");
}

// An outer learning rate of 1e308 passed here and made every parameter infinite at the first
// outer sync; cumulus-train refuses it with the same words.
TEST_F(ToolTest, CheckRefusesAnOuterLearningRateAboveTen) {
  Result r = run("check " + write("ok.yaml", "name: t\n") +
                 " --set trainer.sync=diloco --set diloco.outer_lr=1e308");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out,
            "cumulus-config: error: --set diloco.outer_lr=1e308: diloco.outer_lr: expected a "
            "number in (0, 10], got 1.0e+308\n");
}

TEST_F(ToolTest, DigestDiffReferenceAndDefaults) {
  std::string a = write("a.yaml", "name: t\n");
  std::string b = write("b.yaml", "name: t\noptimizer: {lr: 0.05}\n");
  Result digest = run("digest " + a);
  EXPECT_EQ(digest.status, 0);
  EXPECT_EQ(digest.out, configDigest(parseExperiment("name: t\n", "a")) + "\n");
  Result same = run("diff " + a + " " + a);
  EXPECT_EQ(same.status, 0);
  EXPECT_EQ(same.out, "");
  Result differ = run("diff " + a + " " + b);
  EXPECT_EQ(differ.status, 1);
  EXPECT_EQ(differ.out, "optimizer.lr: 0.1 -> 0.05\n");
  EXPECT_EQ(run("reference").out, referenceMarkdown());
  EXPECT_EQ(run("defaults").out, toYaml(schemaDefaults()));
}

TEST_F(ToolTest, ReferenceRewritesAReadme) {
  std::string readme = write("README.md", "# X\n\nintro\n");
  Result r = run("reference --readme " + readme);
  EXPECT_EQ(r.status, 0) << r.out;
  std::ifstream in(readme);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(
      text.rfind("# X\n\nintro\n\n## Configuration reference\n\n<!-- config-reference:begin -->\n"
                 "| key |",
                 0),
      0u);
  // Idempotent.
  run("reference --readme " + readme);
  std::ifstream again(readme);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()),
            text);
}

TEST_F(ToolTest, ReferenceFileRewritesOnlyTheTableBetweenTheMarkers) {
  const std::string before =
      "# Configuration reference\n\nintro\n\n<!-- config-reference:begin -->\n";
  const std::string after = "<!-- config-reference:end -->\n\nmore text\n";
  std::string doc = write("configuration.md", before + "| stale | table |\n" + after);
  Result r = run("reference --file " + doc);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "updated the configuration reference in " + doc + "\n");
  std::ifstream in(doc);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
            before + referenceMarkdown() + after);
}

TEST_F(ToolTest, ReferenceSaysWhichArgumentsItTakes) {
  Result r = run("reference --out x.md");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "cumulus-config: error: unknown flag --out (see cumulus-config --help)\n");
  Result missing = run("reference --file " + dir_ + "/absent.md");
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.out, "cumulus-config: error: " + dir_ + "/absent.md: not found\n");
}

// A FIFO that no one writes: a blocking open would wait for a writer forever. Each command that
// reads a file refuses it at once, naming it.
TEST_F(ToolTest, AFifoIsRefusedAtOnceNamingIt) {
  const std::string fifo = dir_ + "/x.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  files_.push_back(fifo);
  const std::string tool = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-config";
  const std::vector<std::vector<std::string>> commands = {
      {tool, "check", fifo}, {tool, "digest", fifo}, {tool, "reference", "--file", fifo}};
  for (const std::vector<std::string>& argv : commands) {
    const cumulus::testing::ProcessResult r =
        cumulus::testing::runProcess(argv, {}, {}, /*timeout_s=*/60);
    ASSERT_FALSE(r.timed_out) << argv[1];
    EXPECT_EQ(r.exit_code, 2) << argv[1];
    EXPECT_EQ(r.output, "cumulus-config: error: " + fifo + ": is a FIFO, not a regular file\n")
        << argv[1];
  }
}

TEST_F(ToolTest, HelpGoesToStdoutWithExitZeroAndNoCommandIsAUsageError) {
  Result help = run("--help 2>/dev/null");
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out.rfind("Validates and inspects experiment files.\nUsage: cumulus-config", 0),
            0u)
      << help.out;
  EXPECT_NE(help.out.find("Exit status: 0 ok, 1 diff found differences, 2 error"),
            std::string::npos)
      << help.out;
  Result check_help = run("check --help 2>/dev/null");
  EXPECT_EQ(check_help.status, 0);
  EXPECT_NE(check_help.out.find("--set KEY=VALUE"), std::string::npos) << check_help.out;
  Result none = run("");
  EXPECT_EQ(none.status, 2);
  EXPECT_EQ(none.out,
            "cumulus-config: error: missing COMMAND: check, digest, diff, defaults or reference "
            "(see cumulus-config --help)\n");
  Result unknown = run("frobnicate");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_EQ(unknown.out,
            "cumulus-config: error: unexpected argument \"frobnicate\" (see cumulus-config "
            "--help)\n");
}

}  // namespace
}  // namespace cumulus::configs
