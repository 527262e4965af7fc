// Cumulus as a user gets it: `cmake --install` into a prefix of the test's own, each example
// configured and built out of tree against that prefix alone (find_package(Cumulus), the same
// compiler, Ninja), the collectives example built once more from `pkg-config --cflags --libs
// cumulus`, and the programs run under the installed cumulus-run.
//
// The install and the four builds happen once, in SetUpTestSuite (two side by side); the
// tests then check what they produced. The work directory is EXAMPLES_WORK_DIR, emptied first and
// removed at the end unless a test failed (then it is kept, and named, for a look).
#include <gtest/gtest.h>
#include <signal.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/hash.h"
#include "tests/test_support.h"
#include "tests/trainer/process_runner.h"

namespace cumulus::examples {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::ProcessResult;
using cumulus::testing::runProcess;
using Args = std::vector<std::string>;
using Env = std::vector<std::pair<std::string, std::string>>;

// The lines of metrics.jsonl of one record type, each up to its "time" (which every record ends
// with): the records' own fields, in their order.
std::vector<std::string> linesOfType(const fs::path& jsonl, const std::string& type) {
  std::vector<std::string> out;
  std::ifstream in(jsonl);
  const std::string head = "{\"type\":\"" + type + "\"";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(head + ",", 0) != 0 && line.rfind(head + "}", 0) != 0) continue;
    const size_t time = line.find(",\"time\":");
    out.push_back(time == std::string::npos ? line : line.substr(0, time));
  }
  return out;
}

const std::string kVersion = EXAMPLES_VERSION;
const std::string kDatasetDir = "/usr/share/datasets/fashion-mnist";

// The environment of a program a user starts from a shell: not inside a launched job, with no
// search path that could find another Cumulus than the one installed here.
Env userEnv(Env extra = {}) {
  Env env = {{"WORLD_SIZE", ""},      {"RANK", ""},
             {"LOCAL_RANK", ""},      {"LOCAL_WORLD_SIZE", ""},
             {"CUMULUS_RUN_ID", ""},  {"MASTER_ADDR", ""},
             {"MASTER_PORT", ""},     {"CMAKE_PREFIX_PATH", ""},
             {"PKG_CONFIG_PATH", ""}, {"LD_LIBRARY_PATH", ""}};
  for (auto& e : extra) env.push_back(std::move(e));
  return env;
}

std::vector<std::string> splitWords(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::set<std::string> linesOf(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.insert(line);
  return lines;
}

using cumulus::testing::readFile;

// Decompresses `from` (gzip) into `to`; an empty string, or what went wrong.
std::string gunzip(const std::string& from, const std::string& to) {
  gzFile in = gzopen(from.c_str(), "rb");
  if (in == nullptr) return from + ": cannot open (is dataset-fashion-mnist installed?)";
  std::ofstream out(to, std::ios::binary);
  char chunk[1 << 16];
  int n = 0;
  while ((n = gzread(in, chunk, sizeof chunk)) > 0) out.write(chunk, n);
  gzclose(in);
  out.close();
  if (n < 0 || !out) return from + ": cannot decompress into " + to;
  return "";
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class InstalledCumulus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = EXAMPLES_WORK_DIR;
    fs::remove_all(work_);
    fs::create_directories(work_ / "data");
    const auto start = std::chrono::steady_clock::now();
    install_ = runProcess({EXAMPLES_CMAKE, "--install", CUMULUS_BINARY_DIR, "--prefix", prefix()},
                          userEnv(), {}, 120);
    const double installed = secondsSince(start);
    if (install_.exit_code != 0) return;
    std::thread collectives([] { collectives_build_ = buildExample("collectives"); });
    std::thread custom_loop([] { custom_loop_build_ = buildExample("custom_loop"); });
    pkg_config_build_ = buildWithPkgConfig();
    elastic_loop_build_ = buildExample("elastic_loop");
    for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
      data_error_ += gunzip(kDatasetDir + "/" + name + ".gz", (work_ / "data" / name).string());
    }
    collectives.join();
    custom_loop.join();
    std::printf("install %.1f s, builds %.1f s\n", installed, secondsSince(start) - installed);
  }

  static void TearDownTestSuite() {
    if (failed_) {
      std::printf("kept %s for a look\n", work_.c_str());
    } else {
      fs::remove_all(work_);
    }
  }

  void SetUp() override {
    ASSERT_EQ(install_.exit_code, 0) << "cmake --install failed:\n" << install_.output;
  }
  void TearDown() override { failed_ = failed_ || HasFailure(); }

  static std::string prefix() { return (work_ / "prefix").string(); }
  static std::string bin(const std::string& name) { return prefix() + "/bin/" + name; }

  // cmake configure + build of examples/<name> in <work>/build-<name>, as its README says.
  static ProcessResult buildExample(const std::string& name) {
    const std::string build = (work_ / ("build-" + name)).string();
    Args configure = {EXAMPLES_CMAKE,
                      "-S",
                      std::string(CUMULUS_SOURCE_DIR) + "/examples/" + name,
                      "-B",
                      build,
                      "-G",
                      "Ninja",
                      "-DCMAKE_MAKE_PROGRAM=" EXAMPLES_NINJA,
                      "-DCMAKE_CXX_COMPILER=" EXAMPLES_CXX,
                      "-DCMAKE_BUILD_TYPE=Release",
                      "-DCMAKE_PREFIX_PATH=" + prefix(),
                      "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"};
    if (!std::string(EXAMPLES_CXX_LAUNCHER).empty()) {
      configure.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" EXAMPLES_CXX_LAUNCHER);
    }
    ProcessResult result = runProcess(configure, userEnv(), {}, 300);
    if (result.exit_code != 0) return result;
    ProcessResult built = runProcess({EXAMPLES_CMAKE, "--build", build}, userEnv(), {}, 600);
    built.output = result.output + built.output;
    return built;
  }

  // g++ main.cc $(pkg-config --cflags --libs cumulus), with an rpath to the prefix's lib/.
  static ProcessResult buildWithPkgConfig() {
    const Env env = userEnv({{"PKG_CONFIG_PATH", prefix() + "/lib/pkgconfig"}});
    ProcessResult flags = runProcess({"pkg-config", "--cflags", "--libs", "cumulus"}, env, {}, 60);
    if (flags.exit_code != 0) return flags;
    Args compile;
    if (!std::string(EXAMPLES_CXX_LAUNCHER).empty()) compile.push_back(EXAMPLES_CXX_LAUNCHER);
    compile.insert(compile.end(), {EXAMPLES_CXX, "-std=c++20", "-O1",
                                   CUMULUS_SOURCE_DIR "/examples/collectives/main.cc"});
    for (auto& word : splitWords(flags.output)) compile.push_back(std::move(word));
    compile.insert(compile.end(), {"-Wl,-rpath," + prefix() + "/lib", "-o",
                                   (work_ / "collectives-pkg-config").string()});
    ProcessResult built = runProcess(compile, env, {}, 600);
    built.output = "pkg-config: " + flags.output + built.output;
    return built;
  }

  // `program` under the installed cumulus-run with `workers` local workers.
  static Args underCumulusRun(int workers, Args program) {
    Args argv = {bin("cumulus-run"),      "--standalone", "--nproc-per-node",
                 std::to_string(workers), "--log-dir",    (work_ / "logs").string(),
                 "--monitor-interval",    "0.02",         "--"};
    argv.insert(argv.end(), program.begin(), program.end());
    return argv;
  }

  // The custom loop: short enough for a test, long enough that a SIGTERM after step kSignalAfter
  // lands mid-run.
  static constexpr int kSteps = 240;
  static constexpr int kSignalAfter = 40;

  Args command(const std::string& run) const {
    return underCumulusRun(
        2, {(work_ / "build-custom_loop/custom_loop").string(), "--data", (work_ / "data").string(),
            "--run-dir", (work_ / run).string(), "--steps", std::to_string(kSteps), "--warmup",
            "20", "--checkpoint-every", "50", "--log-every", "10"});
  }
  std::string parametersDigest(const std::string& run) const {
    const std::string bytes = readFile(work_ / run / "final_parameters.bin");
    EXPECT_FALSE(bytes.empty()) << run;
    return base::sha256Hex(bytes);
  }
  // Rank 0's progress lines ("step N/240 loss ... lr ...") by step.
  static std::map<int, std::string> progress(const std::string& output) {
    std::map<int, std::string> lines;
    const std::regex step(R"(\[rank0\] step (\d+)/\d+ loss .*)");
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_match(line, m, step)) lines[std::stoi(m[1])] = line;
    }
    return lines;
  }

  // The elastic loop: long enough that a kill or a notice after step kElasticSignalAfter lands
  // mid-run.
  static constexpr int kElasticSteps = 1000;
  static constexpr int kElasticSignalAfter = 100;

  Args elasticCommand(const std::string& run, Args extra = {}) {
    Args program = {(work_ / "build-elastic_loop/elastic_loop").string(),
                    "--data",
                    (work_ / "data").string(),
                    "--run-dir",
                    (work_ / run).string(),
                    "--steps",
                    std::to_string(kElasticSteps),
                    "--limit",
                    "6000",
                    "--log-every",
                    "50"};
    program.insert(program.end(), extra.begin(), extra.end());
    return underCumulusRun(3, program);
  }

  // Each replica's "final parameters <digest> at step N" line: the digests.
  static std::vector<std::string> finalDigests(const std::string& output) {
    std::vector<std::string> digests;
    const std::regex final_line(R"(\[rank\d\] final parameters ([0-9a-f]{16}) at step (\d+))");
    for (auto it = std::sregex_iterator(output.begin(), output.end(), final_line);
         it != std::sregex_iterator(); ++it) {
      EXPECT_EQ((*it)[2].str(), std::to_string(kElasticSteps));
      digests.push_back((*it)[1].str());
    }
    return digests;
  }

  // The membership lines: epoch, rank, size, cause, pid, and whom the state went to (or "").
  struct MembershipLine {
    int epoch, rank, size;
    std::string cause;
    int pid;
    std::string healed;
  };
  static std::vector<MembershipLine> memberships(const std::string& output) {
    std::vector<MembershipLine> lines;
    const std::regex line(
        R"(membership: epoch (\d+), rank (\d+) of (\d+), step \d+ \((\w+) in [0-9.]+ s\), pid (\d+)(, state from rank \d+ to ([0-9,]+))?)");
    for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
         it != std::sregex_iterator(); ++it) {
      const std::smatch& m = *it;
      lines.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), m[4].str(),
                       std::stoi(m[5]), m[7].str()});
    }
    return lines;
  }

  static inline fs::path work_;
  static inline ProcessResult install_;
  static inline ProcessResult collectives_build_;
  static inline ProcessResult custom_loop_build_;
  static inline ProcessResult pkg_config_build_;
  static inline ProcessResult elastic_loop_build_;
  static inline std::string data_error_;
  static inline bool failed_ = false;
};

TEST_F(InstalledCumulus, PrefixHoldsHeadersLibraryPackageFilesAndPrograms) {
  const fs::path p = prefix();
  for (const char* header :
       {"cumulus.h", "checkpoint.h", "data_parallel.h", "elastic.h", "errors.h", "preemption.h",
        "process_group.h", "sampler.h", "version.h"}) {
    EXPECT_TRUE(fs::is_regular_file(p / "include/cumulus" / header)) << header;
  }
  EXPECT_NE(readFile(p / "include/cumulus/version.h")
                .find("#define CUMULUS_VERSION_STRING \"" + kVersion + "\""),
            std::string::npos);
  // libcumulus.so -> libcumulus.so.X.Y (the SONAME) -> libcumulus.so.X.Y.Z
  const std::string minor = kVersion.substr(0, kVersion.rfind('.'));
  EXPECT_EQ(fs::read_symlink(p / "lib/libcumulus.so"), "libcumulus.so." + minor);
  EXPECT_EQ(fs::read_symlink(p / ("lib/libcumulus.so." + minor)), "libcumulus.so." + kVersion);
  EXPECT_TRUE(fs::is_regular_file(p / ("lib/libcumulus.so." + kVersion)));
  for (const char* file : {"CumulusConfig.cmake", "CumulusConfigVersion.cmake",
                           "CumulusTargets.cmake", "CumulusTargets-release.cmake"}) {
    EXPECT_TRUE(fs::is_regular_file(p / "lib/cmake/Cumulus" / file)) << file;
  }
  EXPECT_NE(readFile(p / "lib/cmake/Cumulus/CumulusConfigVersion.cmake")
                .find("set(PACKAGE_VERSION \"" + kVersion + "\")"),
            std::string::npos);
  EXPECT_NE(readFile(p / "lib/pkgconfig/cumulus.pc").find("\nVersion: " + kVersion + "\n"),
            std::string::npos);
}

// Every installed program answers --version with "<name> <project version>", and the programs a
// user runs are all there.
TEST_F(InstalledCumulus, EveryProgramPrintsTheProjectVersion) {
  std::set<std::string> installed;
  for (const auto& entry : fs::directory_iterator(prefix() + "/bin")) {
    const std::string name = entry.path().filename().string();
    installed.insert(name);
    const ProcessResult r = runProcess({entry.path().string(), "--version"}, userEnv(), {}, 60);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_EQ(r.output, name + " " + kVersion + "\n") << name;
  }
  for (const std::string& name : splitWords(EXAMPLES_PROGRAMS)) {
    EXPECT_EQ(installed.count(name), 1u) << name << " is not installed";
  }
  EXPECT_EQ(installed.size(), splitWords(EXAMPLES_PROGRAMS).size());
}

// Each example configures and builds against the test's prefix, not some other Cumulus.
TEST_F(InstalledCumulus, ExamplesBuildAgainstTheInstalledPackageOnly) {
  for (const auto& [name, build] : {std::pair{"collectives", &collectives_build_},
                                    std::pair{"custom_loop", &custom_loop_build_},
                                    std::pair{"elastic_loop", &elastic_loop_build_}}) {
    ASSERT_EQ(build->exit_code, 0) << name << ":\n" << build->output;
    const std::string cache = readFile(work_ / ("build-" + std::string(name)) / "CMakeCache.txt");
    EXPECT_NE(cache.find("Cumulus_DIR:PATH=" + prefix() + "/lib/cmake/Cumulus\n"),
              std::string::npos)
        << name;
    EXPECT_TRUE(fs::is_regular_file(work_ / ("build-" + std::string(name)) / name)) << name;
  }
}

// cumulus.pc's flags compile and link the collectives example, which then runs as a group of one.
TEST_F(InstalledCumulus, PkgConfigFlagsBuildTheCollectivesExample) {
  ASSERT_EQ(pkg_config_build_.exit_code, 0) << pkg_config_build_.output;
  const ProcessResult version =
      runProcess({"pkg-config", "--modversion", "cumulus"},
                 userEnv({{"PKG_CONFIG_PATH", prefix() + "/lib/pkgconfig"}}), {}, 60);
  EXPECT_EQ(version.output, kVersion + "\n");
  const ProcessResult alone =
      runProcess({(work_ / "collectives-pkg-config").string()}, userEnv(), {}, 60);
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_EQ(alone.output, "rank 0 of 1 (cumulus " + kVersion + ")\n" +
                              "allreduce sum of rank+1 = [1, 1, 1, 1]\n"
                              "allreduce max of rank = [0, 0]\n"
                              "allreduce avg of rank = [0, 0]\n"
                              "broadcast from rank 0 = [0, 1, 2]\n"
                              "allgather of [rank, rank^2] = [[0, 0]]\n"
                              "reduceScatter of [0..2P) + rank = [0, 1]\n"
                              "barrier passed\n");
}

// Three workers under cumulus-run: every rank prints the answers known for P = 3.
TEST_F(InstalledCumulus, CollectivesUnderCumulusRunGiveTheKnownAnswers) {
  ASSERT_EQ(collectives_build_.exit_code, 0) << collectives_build_.output;
  const ProcessResult r = runProcess(
      underCumulusRun(3, {(work_ / "build-collectives/collectives").string()}), userEnv(), {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::set<std::string> lines = linesOf(r.output);
  const char* blocks[] = {"[3, 6]", "[9, 12]", "[15, 18]"};  // elements 2r, 2r+1 of 3i + 3
  for (int rank = 0; rank < 3; ++rank) {
    const std::string at = "[rank" + std::to_string(rank) + "] ";
    for (const std::string& line :
         {"rank " + std::to_string(rank) + " of 3 (cumulus " + kVersion + ")",
          std::string("allreduce sum of rank+1 = [6, 6, 6, 6]"),  // 3·4/2
          std::string("allreduce max of rank = [2, 2]"),
          std::string("allreduce avg of rank = [1, 1]"),
          std::string("broadcast from rank 2 = [200, 201, 202]"),
          std::string("allgather of [rank, rank^2] = [[0, 0], [1, 1], [2, 4]]"),
          "reduceScatter of [0..2P) + rank = " + std::string(blocks[rank]),
          std::string("barrier passed")}) {
      EXPECT_EQ(lines.count(at + line), 1u) << at + line << "\n" << r.output;
    }
  }
}

// The plain DDP script, whose only Cumulus lines are `import cumulus` and the backend's name,
// trains under the installed cumulus-run with the installed Python package, to the same
// parameters on both ranks.
TEST_F(InstalledCumulus, PythonDdpScriptTrainsFromThePrefixUnderCumulusRun) {
#ifndef EXAMPLES_PYTHON_DIR
  GTEST_SKIP() << "the Python package is not built (python/CMakeLists.txt says why)";
#else
  const std::string package = prefix() + "/" + EXAMPLES_PYTHON_DIR;
  ASSERT_TRUE(fs::is_regular_file(package + "/cumulus/__init__.py")) << package;
  const ProcessResult r = runProcess(
      underCumulusRun(
          2, {CUMULUS_PYTHON, CUMULUS_SOURCE_DIR "/examples/python/ddp.py", "--epochs", "1"}),
      userEnv({{"PYTHONPATH", package}, {"OMP_NUM_THREADS", "1"}}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch accuracy;
  ASSERT_TRUE(std::regex_search(
      r.output, accuracy,
      std::regex(R"(\[rank0\] epoch 1: test accuracy (0\.\d+) \(2 ranks, backend cumulus\))")))
      << r.output;
  EXPECT_GT(std::stod(accuracy[1]), 0.8) << r.output;
  std::smatch digest;
  ASSERT_TRUE(std::regex_search(r.output, digest,
                                std::regex(R"(\[rank0\] rank 0: parameters sha256 ([0-9a-f]+))")))
      << r.output;
  EXPECT_NE(r.output.find("[rank1] rank 1: parameters sha256 " + digest[1].str()),
            std::string::npos)
      << r.output;
#endif
}

// A user's own loop trains in bf16 with the public Autocast guard: the loss falls as in fp32,
// and the two precisions train differently (the guard did something).
TEST_F(InstalledCumulus, CustomLoopTrainsInBf16WithThePublicAutocast) {
  ASSERT_EQ(custom_loop_build_.exit_code, 0) << custom_loop_build_.output;
  ASSERT_EQ(data_error_, "");
  std::map<std::string, std::map<int, std::string>> lines;
  for (const std::string precision : {"fp32", "bf16"}) {
    const ProcessResult r =
        runProcess(underCumulusRun(2, {(work_ / "build-custom_loop/custom_loop").string(), "--data",
                                       (work_ / "data").string(), "--run-dir",
                                       (work_ / ("precision-" + precision)).string(), "--steps",
                                       "60", "--warmup", "10", "--log-every", "10", "--limit",
                                       "4096", "--precision", precision}),
                   userEnv(), {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("[rank0] precision: " + precision + " (as asked"), std::string::npos)
        << r.output;
    lines[precision] = progress(r.output);
    ASSERT_EQ(lines[precision].size(), 6u) << r.output;
  }
  const std::regex loss(R"(.* loss ([0-9.]+) .*)");
  const auto lossAt = [&](const std::string& precision, int step) {
    std::smatch m;
    EXPECT_TRUE(std::regex_match(lines[precision][step], m, loss)) << lines[precision][step];
    return std::stod(m[1]);
  };
  EXPECT_LT(lossAt("bf16", 60), 0.8 * lossAt("bf16", 10));
  EXPECT_NEAR(lossAt("bf16", 60), lossAt("fp32", 60), 0.05 * lossAt("fp32", 60));
  EXPECT_NE(lines["bf16"][60], lines["fp32"][60]);
}

// Preempted by a SIGTERM to cumulus-run and relaunched, the custom loop ends with exactly the
// parameters of a run that was never stopped.
TEST_F(InstalledCumulus, CustomLoopPreemptedAndRelaunchedEndsBitIdenticalToUninterrupted) {
  ASSERT_EQ(custom_loop_build_.exit_code, 0) << custom_loop_build_.output;
  ASSERT_EQ(data_error_, "");
  const ProcessResult whole = runProcess(command("whole"), userEnv(), {}, 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string expected = parametersDigest("whole");

  bool sent = false;
  const std::regex progress_line(R"(\[rank0\] step (\d+)/.*)");
  const ProcessResult first = runProcess(
      command("preempted"), userEnv(),
      [&](const std::string& line, pid_t pid) {
        std::smatch m;
        if (!sent && std::regex_match(line, m, progress_line) && std::stoi(m[1]) >= kSignalAfter) {
          sent = true;
          ::kill(pid, SIGTERM);  // to cumulus-run, which forwards it
        }
      },
      300);
  ASSERT_TRUE(sent) << first.output;
  ASSERT_EQ(first.exit_code, 75) << first.output;
  std::smatch stop;
  ASSERT_TRUE(std::regex_search(
      first.output, stop, std::regex(R"(\[rank0\] preempted at step (\d+), checkpoint (\S+))")))
      << first.output;
  const int stop_step = std::stoi(stop[1]);
  EXPECT_GE(stop_step, kSignalAfter);
  EXPECT_LT(stop_step, kSteps);
  char name[32];
  std::snprintf(name, sizeof name, "step-%08d", stop_step);
  EXPECT_EQ(stop[2].str(), (work_ / "preempted/checkpoints" / name).string());

  const ProcessResult second = runProcess(command("preempted"), userEnv(), {}, 300);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("[rank0] resumed from " + stop[2].str() + " at step " +
                               std::to_string(stop_step) + "\n"),
            std::string::npos)
      << second.output;
  EXPECT_EQ(parametersDigest("preempted"), expected);
  // The relaunch starts after the stop, and its progress lines (loss and learning rate printed in
  // full) are those of the uninterrupted run.
  const std::map<int, std::string> resumed = progress(second.output);
  const std::map<int, std::string> uninterrupted = progress(whole.output);
  ASSERT_FALSE(resumed.empty()) << second.output;
  EXPECT_GT(resumed.begin()->first, stop_step);
  for (const auto& [step, line] : resumed) EXPECT_EQ(line, uninterrupted.at(step));
}

// Under cumulus-run with recovery in place, a SIGKILL of one of three workers leaves the other two
// training on as the same processes; cumulus-run's replacement joins and takes the state from a
// live peer, and all three end with the same parameters.
TEST_F(InstalledCumulus, ElasticLoopSurvivesAKillInPlaceAndHealsTheReplacement) {
  ASSERT_EQ(elastic_loop_build_.exit_code, 0) << elastic_loop_build_.output;
  ASSERT_EQ(data_error_, "");
  std::string seen;
  bool killed = false;
  const std::regex progress_line(R"(\[rank0\] step (\d+)/.*)");
  const ProcessResult r = runProcess(
      elasticCommand("elastic-kill", {"--wait-for", "3"}), userEnv({{"OMP_NUM_THREADS", "1"}}),
      [&](const std::string& line, pid_t) {
        seen += line + "\n";
        std::smatch m;
        if (killed || !std::regex_match(line, m, progress_line) ||
            std::stoi(m[1]) < kElasticSignalAfter) {
          return;
        }
        for (const MembershipLine& member : memberships(seen)) {
          if (member.epoch == 0 && member.rank == 1) {
            killed = ::kill(member.pid, SIGKILL) == 0;
          }
        }
      },
      300);
  ASSERT_TRUE(killed) << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: rank 1 (member 0.1.0) died (signal SIGKILL); the group "
                          "goes on without it; starting a replacement (member 0.1.1)"),
            std::string::npos)
      << r.output;
  // Epoch 0 is the launch; then the two survivors re-form once (each prints one "failure" line,
  // whether the failure found it training or agreeing at the boundary), and the last epoch, of
  // three, admits the replacement and heals it. (An epoch number may be skipped: a re-forming
  // attempt that fails to connect is retried without a line.)
  std::map<int, int> launch_pids;  // rank -> pid at epoch 0
  std::set<int> survivors, last_three;
  int last_epoch = 0;
  for (const MembershipLine& m : memberships(r.output)) last_epoch = std::max(last_epoch, m.epoch);
  for (const MembershipLine& m : memberships(r.output)) {
    if (m.epoch == 0) launch_pids[m.rank] = m.pid;
    if (m.epoch > 0 && m.epoch < last_epoch) {
      EXPECT_EQ(m.cause, "failure");
      EXPECT_EQ(m.size, 2);
      EXPECT_TRUE(survivors.insert(m.pid).second) << "a survivor re-formed twice:\n" << r.output;
    }
    if (m.epoch == last_epoch) {
      EXPECT_EQ(m.size, 3);
      EXPECT_EQ(m.healed, "2");  // the replacement, healed from a live peer
      last_three.insert(m.pid);
    }
  }
  ASSERT_EQ(launch_pids.size(), 3u) << r.output;
  EXPECT_GE(last_epoch, 2) << r.output;
  EXPECT_EQ(survivors, (std::set<int>{launch_pids[0], launch_pids[2]})) << r.output;
  EXPECT_EQ(last_three.size(), 3u) << r.output;
  EXPECT_EQ(last_three.count(launch_pids[1]), 0u) << "the killed worker is not back";
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(membership: epoch \d+, rank 2 of 3, step \d+ \(join in )")))
      << r.output;
  const std::vector<std::string> digests = finalDigests(r.output);
  ASSERT_EQ(digests.size(), 3u) << r.output;
  EXPECT_EQ(std::set<std::string>(digests.begin(), digests.end()).size(), 1u) << r.output;
  // The loop's recorder wrote what cumulus-train writes: a train record at step 1, every 50 steps
  // and the last, each once although the kill made steps be redone; the re-forming as a record
  // and in the goodput account; TensorBoard's events.
  const fs::path run_dir = work_ / "elastic-kill";
  std::vector<int> train_steps, want_steps = {1};
  for (int s = 50; s <= kElasticSteps; s += 50) want_steps.push_back(s);
  std::vector<std::string> reform_causes;
  double last_reform_s = -1;
  std::ifstream jsonl(run_dir / "metrics.jsonl");
  ASSERT_TRUE(jsonl) << "no " << (run_dir / "metrics.jsonl");
  const std::regex type(R"re("type":"(\w+)")re"), step(R"re("step":(\d+))re"),
      cause(R"re("cause":"(\w+)")re"), reform_s(R"re("reform_s":([0-9.eE+-]+))re");
  for (std::string line; std::getline(jsonl, line);) {
    std::smatch t, m;
    if (!std::regex_search(line, t, type)) continue;
    if (t[1] == "train" && std::regex_search(line, m, step)) train_steps.push_back(std::stoi(m[1]));
    if (t[1] == "reform" && std::regex_search(line, m, cause)) reform_causes.push_back(m[1]);
    if (t[1] == "goodput" && std::regex_search(line, m, reform_s)) last_reform_s = std::stod(m[1]);
  }
  EXPECT_EQ(train_steps, want_steps);
  ASSERT_FALSE(reform_causes.empty());
  EXPECT_EQ(reform_causes.front(), "failure");
  EXPECT_GT(last_reform_s, 0);
  bool events = false;
  for (const auto& e : fs::directory_iterator(run_dir / "tensorboard")) {
    events = events || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events) << "no TensorBoard events file in " << (run_dir / "tensorboard");
}

// The loop watched as its user watches it (tests/launch/watch_loop.py): under the installed
// cumulus-run with --metrics-port, while it trains, its step and training time at /metrics and
// its loss, a bar per rank and the goodput in the live dashboard (headless Chromium); after a
// SIGTERM (exit 75), TensorBoard's own reader and the installed cumulus-report's page, drawn,
// find every train record.
TEST_F(InstalledCumulus, ElasticLoopIsWatchedLiveAndItsRecordsAreReadBack) {
  ASSERT_EQ(elastic_loop_build_.exit_code, 0) << elastic_loop_build_.output;
  ASSERT_EQ(data_error_, "");
  const std::string run_dir = (work_ / "elastic-watched").string();
  const ProcessResult r =
      runProcess({CUMULUS_PYTHON, CUMULUS_SOURCE_DIR "/tests/launch/watch_loop.py",
                  "--bin",        prefix() + "/bin",
                  "--run-dir",    run_dir,
                  "--workers",    "3",
                  "--after",      std::to_string(kElasticSignalAfter),
                  "--log-every",  "50",
                  "--",           (work_ / "build-elastic_loop/elastic_loop").string(),
                  "--data",       (work_ / "data").string(),
                  "--run-dir",    run_dir,
                  "--steps",      "1000000",
                  "--limit",      "6000",
                  "--log-every",  "50"},
                 userEnv({{"OMP_NUM_THREADS", "1"}}), {}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("watch_loop: ok: step "), std::string::npos) << r.output;
}

// A SIGTERM to cumulus-run checkpoints every replica's step and exits 75; the relaunch resumes and
// ends with exactly the parameters of a run that was never stopped.
TEST_F(InstalledCumulus, ElasticLoopPreemptedAndRelaunchedEndsBitIdenticalToUninterrupted) {
  ASSERT_EQ(elastic_loop_build_.exit_code, 0) << elastic_loop_build_.output;
  ASSERT_EQ(data_error_, "");
  const Env env = userEnv({{"OMP_NUM_THREADS", "1"}});
  const ProcessResult whole = runProcess(elasticCommand("elastic-whole"), env, {}, 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::vector<std::string> expected = finalDigests(whole.output);
  ASSERT_EQ(expected.size(), 3u) << whole.output;

  bool sent = false;
  const std::regex progress_line(R"(\[rank0\] step (\d+)/.*)");
  const ProcessResult first = runProcess(
      elasticCommand("elastic-preempted"), env,
      [&](const std::string& line, pid_t pid) {
        std::smatch m;
        if (!sent && std::regex_match(line, m, progress_line) &&
            std::stoi(m[1]) >= kElasticSignalAfter) {
          sent = ::kill(pid, SIGTERM) == 0;  // to cumulus-run, which forwards it
        }
      },
      300);
  ASSERT_TRUE(sent) << first.output;
  ASSERT_EQ(first.exit_code, 75) << first.output;
  std::smatch stop;
  ASSERT_TRUE(std::regex_search(
      first.output, stop, std::regex(R"(\[rank0\] preempted at step (\d+), checkpoint (\S+))")))
      << first.output;
  // The loop's recorder marked the stop's save and the stop (Recorder::checkpoint, ::preempted).
  const fs::path jsonl = work_ / "elastic-preempted/metrics.jsonl";
  const std::string at_stop = "\"step\":" + stop[1].str();
  EXPECT_EQ(linesOfType(jsonl, "preempted"),
            std::vector<std::string>{"{\"type\":\"preempted\"," + at_stop + ",\"checkpoint\":\"" +
                                     stop[2].str() + "\""})
      << first.output;
  const std::vector<std::string> saves = linesOfType(jsonl, "checkpoint");
  ASSERT_FALSE(saves.empty());
  EXPECT_EQ(saves.back().rfind("{\"type\":\"checkpoint\"," + at_stop + ",\"stall_ms\":", 0), 0u)
      << saves.back();
  EXPECT_NE(saves.back().find("\"path\":\"" + stop[2].str() + "\""), std::string::npos)
      << saves.back();
  const ProcessResult second = runProcess(elasticCommand("elastic-preempted"), env, {}, 300);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("[rank0] resumed at step " + stop[1].str() + "\n"),
            std::string::npos)
      << second.output;
  EXPECT_EQ(finalDigests(second.output), expected) << second.output;
  // The relaunch continued the file, to the final save and one summary.
  EXPECT_EQ(
      linesOfType(jsonl, "checkpoint")
          .back()
          .rfind("{\"type\":\"checkpoint\",\"step\":" + std::to_string(kElasticSteps) + ",", 0),
      0u);
  EXPECT_EQ(linesOfType(jsonl, "summary").size(), 1u);
  EXPECT_EQ(linesOfType(jsonl, "preempted").size(), 1u);
}

// A bad flag or missing data is one line naming it, and exit status 2.
TEST_F(InstalledCumulus, CustomLoopBadFlagsAndMissingDataExitTwoWithAMessage) {
  ASSERT_EQ(custom_loop_build_.exit_code, 0) << custom_loop_build_.output;
  const std::string program = (work_ / "build-custom_loop/custom_loop").string();
  const std::string empty = (work_ / "no-data").string();
  fs::create_directories(empty);
  const std::vector<std::pair<Args, std::string>> cases = {
      {{program, "--data", empty, "--run-dir", empty, "--steps", "ten"},
       "custom_loop: --steps: expected an integer >= 1, got 'ten'\n"},
      {{program, "--data", empty, "--run-dir", empty, "--precision", "fp16"},
       "custom_loop: --precision: unknown precision 'fp16': expected one of fp32, bf16, auto; did "
       "you mean 'fp32'?\n"},
      {{program, "--data", empty, "--run-dir", empty, "--epochs", "3"},
       "custom_loop: unknown flag --epochs; see custom_loop --help\n"},
      {{program, "--run-dir", empty}, "custom_loop: --data is required; see custom_loop --help\n"},
      {{program, "--data", empty, "--run-dir", empty},
       "custom_loop: " + empty +
           "/train-images-idx3-ubyte not found: --data must name a directory holding the "
           "uncompressed Fashion-MNIST training files (gunzip "
           "/usr/share/datasets/fashion-mnist/train-*.gz into it)\n"},
  };
  for (const auto& [argv, message] : cases) {
    const ProcessResult r = runProcess(argv, userEnv(), {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output, message);
  }
}

}  // namespace
}  // namespace cumulus::examples
