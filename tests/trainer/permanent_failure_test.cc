// Permanent failures end the job, end to end: cumulus-run with recovery in place over two real
// cumulus-train workers whose loss diverges, or whose TorchScript model throws in forward. A
// replacement would fail the same way, so the launcher starts none: it kills the other worker and
// exits 2 within seconds of the worker's error, and its last line repeats that error and names
// the log that holds it. The TorchScript model is made by make_user_fixtures.py with the
// project environment's Python and torch (CUMULUS_PYTHON).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/test_dir.h"
#include "tests/test_support.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::Args;
using cumulus::testing::ProcessResult;
using cumulus::testing::runProcess;
using Clock = std::chrono::steady_clock;

const std::string kPython = CUMULUS_PYTHON;

std::string lastLine(const std::string& output) {
  const size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = output.rfind('\n', end);
  return output.substr(begin == std::string::npos ? 0 : begin + 1,
                       end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

using cumulus::testing::readFile;

// How the launch ended, and how long after the first worker's error line it took.
struct Launch {
  ProcessResult result;
  double seconds_after_error = -1;  // -1: no worker printed an error
};

class PermanentFailureTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cumulus::testing::freshTestDir("permanent"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Two workers of `train_argv` under cumulus-run with recovery in place and restarts to spare.
  Launch launch(Args train_argv) {
    const Args argv =
        cumulus::testing::groupOf(2, (dir_ / "logs").string(), std::move(train_argv),
                                  {"--recovery=in_place", "--run-id=perm", "--max-restarts=3"});
    bool seen = false;
    Clock::time_point error_at;
    Launch launch;
    launch.result =
        runProcess(argv, cumulus::testing::aloneEnv(), [&](const std::string& line, pid_t) {
          if (!seen && line.find("cumulus-train: error: ") != std::string::npos) {
            seen = true;
            error_at = Clock::now();
          }
        });
    if (seen) {
      launch.seconds_after_error = std::chrono::duration<double>(Clock::now() - error_at).count();
    }
    return launch;
  }

  // The launcher gave up at once, and its last line is the worker's error (matched by
  // `error_pattern`, without groups of its own) with the log that holds it.
  void expectGaveUpOn(const Launch& launch, const std::string& error_pattern) {
    const ProcessResult& r = launch.result;
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_GE(launch.seconds_after_error, 0.0) << r.output;
    EXPECT_LT(launch.seconds_after_error, 5.0) << r.output;
    EXPECT_EQ(r.output.find("starting a replacement"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("the group goes on"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << r.output;
    const std::string last = lastLine(r.output);
    std::smatch m;
    ASSERT_TRUE(std::regex_match(
        last, m,
        std::regex("cumulus-run: giving up: rank ([01]) failed \\(exit code 2\\), an error that a "
                   "restart would repeat, so none was tried: (cumulus-train: error: " +
                   error_pattern + ") \\(see (.*/perm/gen0/rank([01])\\.log)\\)")))
        << last << "\n"
        << r.output;
    EXPECT_EQ(m[1], m[4]) << last;  // the failed rank's own log
    EXPECT_NE(readFile(m[3].str()).find(m[2].str() + "\n"), std::string::npos) << m[3];
  }

  fs::path dir_;
};

TEST_F(PermanentFailureTest, ADivergedLossEndsTheJobInPlaceWithoutAReplacement) {
  const Launch launch =
      this->launch({cumulus::testing::kTrain, CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "--set",
                    "trainer.run_dir=" + (dir_ / "run").string(), "--set", "optimizer.lr=1e30"});
  expectGaveUpOn(launch,
                 "training diverged at step [0-9]+ \\(loss -?(?:nan|inf)\\); lower optimizer.lr or "
                 "set trainer.grad_clip_norm");
}

// comm.cost_model naming a FIFO no one writes: every worker waited in open(2) for a writer, and
// the job with them. Each refuses it at once, and the job ends on that error.
TEST_F(PermanentFailureTest, ACostModelThatIsAFifoEndsTheJobAtOnce) {
  const std::string fifo = (dir_ / "cost_model.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Launch launch = this->launch(
      {cumulus::testing::kTrain, CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "--set",
       "trainer.run_dir=" + (dir_ / "run").string(), "--set", "comm.cost_model=" + fifo});
  ASSERT_FALSE(launch.result.timed_out) << launch.result.output;
  expectGaveUpOn(launch,
                 "cost_model: cost model file '" +
                     std::regex_replace(fifo, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                     "': is a FIFO, not a regular file");
}

class ModelErrorTest : public PermanentFailureTest {
 protected:
  static void SetUpTestSuite() {
    fixtures_ = fs::path(::testing::TempDir()) / ("model_error_" + std::to_string(::getpid()));
    fs::remove_all(fixtures_);
    const std::string make = kPython +
                             " " CUMULUS_SOURCE_DIR "/tests/trainer/make_user_fixtures.py " +
                             fixtures_.string() + " >/dev/null 2>&1";
    made_ = std::system(make.c_str()) == 0;
    if (!made_) ADD_FAILURE() << "make_user_fixtures.py failed: " << make;
  }
  static void TearDownTestSuite() { fs::remove_all(fixtures_); }
  void SetUp() override {
    if (!made_) GTEST_FAIL() << "make_user_fixtures.py failed: the fixtures are missing";
    PermanentFailureTest::SetUp();
  }
  static inline fs::path fixtures_;
  static inline bool made_ = false;
};

// `model` (a fixture) on `train` (a fixture's folder) and regression/test; returns its path.
std::string regressionConfig(const fs::path& dir, const fs::path& fixtures,
                             const std::string& model, const std::string& train,
                             const std::string& trainer_extra = "") {
  const fs::path path = dir / "regression.yaml";
  std::ofstream(path) << "name: regression\n"
                      << "model: {name: torchscript:" << (fixtures / model).string() << "}\n"
                      << "data: {format: npy, train: " << (fixtures / train).string()
                      << ", test: " << (fixtures / "regression/test").string() << "}\n"
                      << "loss: {name: mse}\n"
                      << "optimizer: {name: sgd, lr: 0.05}\n"
                      << "trainer: {global_batch_size: 32, epochs: 1, threads: 1, run_dir: "
                      << (dir / "run").string() << trainer_extra << "}\n";
  return path.string();
}

TEST_F(ModelErrorTest, AnExceptionFromTheModelsForwardEndsTheJobInPlace) {
  const std::string model = (fixtures_ / "fails_on_batches.pt").string();
  const Launch launch =
      this->launch({cumulus::testing::kTrain,
                    regressionConfig(dir_, fixtures_, "fails_on_batches.pt", "regression/train")});
  expectGaveUpOn(
      launch,
      "torchscript model " +
          std::regex_replace(model, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
          ": forward failed: (?:builtins\\.)?RuntimeError: this model fails on a batch of more "
          "than one sample");
}

// One rank's forward hangs (it drew the marked sample) while the other waits for it in sync: the
// job ends on the hanging rank's own watchdog, which names it and its phase, not on the waiting
// rank's, and no replacement is started.
TEST_F(ModelErrorTest, AForwardThatHangsOnOneRankIsNamedByThatRanksWatchdog) {
  const Launch launch = this->launch(
      {cumulus::testing::kTrain, regressionConfig(dir_, fixtures_, "hangs_on_marked.pt", "marked",
                                                  ", step_timeout_seconds: 2")});
  expectGaveUpOn(launch,
                 "rank [01]: step [0-9]+ made no progress in forward for 2 s "
                 "\\(trainer.step_timeout_seconds\\); a step that hangs hangs again when "
                 "retried, so the job stops: look for an endless loop or a blocking call in "
                 "forward, or raise trainer.step_timeout_seconds");
}

}  // namespace
}  // namespace cumulus::trainer
