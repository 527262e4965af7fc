// cumulus-train as a user runs it: exit codes and messages. No LibTorch in this file.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "comm/store_server.h"
#include "tests/test_dir.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout and stderr, in that order
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cumulus::testing::freshTestDir("cli_test"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Runs `env ARGS cumulus-train ...` through the shell with stdout and stderr captured apart, in
  // this test's own directory: an experiment's relative trainer.run_dir (smoke.yaml's runs/smoke)
  // is then the test's own, and tests running at once do not hold each other's run directory.
  Outcome run(const std::string& args, const std::string& env = "") {
    const std::string out = (dir_ / "stdout").string();
    const std::string err = (dir_ / "stderr").string();
    const std::string command = "cd '" + dir_.string() + "' && env -u WORLD_SIZE -u RANK " + env +
                                " " CUMULUS_BINARY_DIR "/bin/cumulus-train " + args + " > " + out +
                                " 2> " + err;
    const int status = std::system(command.c_str());
    Outcome o;
    o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.out = slurp(out);
    o.err = slurp(err);
    return o;
  }

  fs::path dir_;
};

TEST_F(CliTest, ABadConfigExitsTwoWithTheConfigError) {
  const std::string path = write("bad.yaml", "name: bad\noptimizer:\n  lr: fast\n");
  const Outcome o = run(path);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err.rfind("cumulus-train: error: " + path + ":3:", 0), 0u) << o.err;
  EXPECT_NE(o.err.find("optimizer.lr"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("terminate"), std::string::npos) << o.err;
  EXPECT_EQ(o.out, "");
}

TEST_F(CliTest, AMissingConfigFileExitsTwo) {
  const Outcome o = run((dir_ / "absent.yaml").string());
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err.rfind("cumulus-train: error: ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find("absent.yaml"), std::string::npos) << o.err;
}

TEST_F(CliTest, AMissingDatasetExitsTwoNamingTheDirectory) {
  const std::string path = write("x.yaml", "name: x\ndata:\n  dir: /nonexistent/fashion\n");
  const Outcome o = run(path);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err.rfind("cumulus-train: error: ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find("/nonexistent/fashion"), std::string::npos) << o.err;
}

// A FIFO as the data file: open(2) would wait for a writer forever (and a SIGTERM then looked like
// a preemption, exit 75). It is refused at once, naming the path and what it is.
TEST_F(CliTest, AFifoAsTheDataFileIsRefusedWithoutHanging) {
  const std::string fifo = (dir_ / "tokens.npy").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const cumulus::testing::ProcessResult r = cumulus::testing::runProcess(
      {cumulus::testing::kTrain, CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "--set",
       "trainer.run_dir=" + (dir_ / "run").string(), "--set", "data.format=tokens", "--set",
       "data.train=" + fifo, "--set", "data.test=" + fifo},
      cumulus::testing::aloneEnv(), {}, /*timeout_s=*/60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "cumulus-train: error: data.train: " + fifo + ": is a FIFO, not a regular file\n");
}

// The experiment itself a FIFO that no one writes: cumulus-train waited in open(2) for a writer,
// and its SIGTERM handler was not up yet to stop it. It is refused at once, naming it.
TEST_F(CliTest, AFifoAsTheExperimentIsRefusedWithoutHanging) {
  const std::string fifo = (dir_ / "x.yaml").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const cumulus::testing::ProcessResult r = cumulus::testing::runProcess(
      {cumulus::testing::kTrain, fifo}, cumulus::testing::aloneEnv(), {}, /*timeout_s=*/60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "cumulus-train: error: " + fifo + ": is a FIFO, not a regular file\n");
}

TEST_F(CliTest, APrecisionOtherThanFp32Bf16OrAutoExitsTwoNamingThem) {
  const std::string path = write("x.yaml", "name: x\ntrainer:\n  precision: fp16\n");
  const Outcome o = run(path);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "cumulus-train: error: " + path +
                       ":3:14: trainer.precision: expected one of fp32, bf16, auto, got \"fp16\"; "
                       "did you mean `fp32`?\n");
}

// trainer.sync diloco: what only the model can tell (a fragment holds whole tensors; smoke.yaml's
// mlp has 4) exits 2 naming the key, before any step; so do the config's own checks.
TEST_F(CliTest, DilocoFragmentsBeyondTheModelsTensorsExitTwoNamingTheKey) {
  const Outcome o = run(std::string(CUMULUS_SOURCE_DIR) +
                        "/configs/smoke.yaml --set trainer.sync=diloco --set diloco.inner_steps=8 "
                        "--set diloco.fragments=5");
  EXPECT_EQ(o.exit_code, 2) << o.out << o.err;
  EXPECT_EQ(o.err,
            "cumulus-train: error: diloco.fragments: 5 is more than the model's 4 parameter "
            "tensors; a fragment holds whole tensors, so use at most 4\n");
  const std::string path =
      write("d.yaml", "name: d\ntrainer: {sync: diloco}\ncomm: {algorithm: funnel}\n");
  const Outcome funnel = run(path);
  EXPECT_EQ(funnel.exit_code, 2);
  EXPECT_NE(funnel.err.find("comm.algorithm: funnel cannot carry DiLoCo's outer syncs"),
            std::string::npos)
      << funnel.err;
}

// oneDNN limited below bf16 by the user (ONEDNN_MAX_CPU_ISA) is no native bf16, on any CPU.
TEST_F(CliTest, AutoPrecisionSaysWhichAndWhyInTheSecondLine) {
  const Outcome o = run(CUMULUS_SOURCE_DIR
                        "/configs/smoke.yaml --set trainer.precision=auto "
                        "--set trainer.max_steps=2 --set trainer.run_dir=run",
                        "ONEDNN_MAX_CPU_ISA=AVX2");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  std::istringstream lines(o.out);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_EQ(first.rfind("model: mlp 784-64-10", 0), 0u) << o.out;
  EXPECT_EQ(second.rfind("precision: fp32 (auto: this CPU has no native bf16 (", 0), 0u) << o.out;
}

TEST_F(CliTest, MoreThreadsThanCoresExitsTwoNamingTheKey) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const std::string cores = std::to_string(CPU_COUNT(&set));
  const Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set trainer.threads=1000000");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "cumulus-train: error: trainer.threads: 1000000 is more than the " + cores +
                       " cores this process may use (its CPU affinity); set at most " + cores +
                       ", or 0 for cores / local workers\n");
}

// 2^59 + 1 epochs of 16 steps is 2^63 + 16 steps: it used to wrap around and train 16 steps.
TEST_F(CliTest, AnEpochCountWhoseStepsOverflowExitsTwo) {
  const Outcome o =
      run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set trainer.epochs=576460752303423489");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: trainer.epochs: 576460752303423489 epochs of 16 steps is more "
            "steps than a 64-bit count holds; lower trainer.epochs or set trainer.max_steps\n");
  EXPECT_EQ(o.out, "");
}

// A size beyond its cap exits 2 with the words cumulus-config check uses
// (tests/configs/tool_test.cc), before anything is built: 2^63 - 1 synthetic samples used to wrap
// around to "size must be positive, got -9223372036854775297".
TEST_F(CliTest, ASizeBeyondItsCapExitsTwoNamingTheKeyAndTheRange) {
  const Outcome o = run(CUMULUS_SOURCE_DIR
                        "/configs/smoke.yaml --set data.synthetic_train_samples="
                        "9223372036854775807");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: --set data.synthetic_train_samples=9223372036854775807: "
            "data.synthetic_train_samples: expected an integer in [1, 1000000000], got "
            "9223372036854775807\n");
  EXPECT_EQ(o.out, "");
}

// diloco.outer_lr=1e308 made every parameter infinite at the first outer sync, and the run then
// advised lowering optimizer.lr; it is refused before anything runs, as cumulus-config check does.
TEST_F(CliTest, AnOuterLearningRateAboveTenExitsTwoNamingTheKeyAndTheRange) {
  const Outcome o = run(CUMULUS_SOURCE_DIR
                        "/configs/smoke.yaml --set trainer.sync=diloco --set "
                        "diloco.outer_lr=1e308");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: --set diloco.outer_lr=1e308: diloco.outer_lr: expected a "
            "number in (0, 10], got 1.0e+308\n");
  EXPECT_EQ(o.out, "");
}

// Under DiLoCo a diverged loss names both optimizers, the inner one first, with the outer one's
// settings (trainer/divergence.h; its tests tell the outer step's own divergence apart). It used
// to advise lowering optimizer.lr alone.
TEST_F(CliTest, ADilocoDivergenceNamesTheOuterOptimizerToo) {
  const Outcome o = run(CUMULUS_SOURCE_DIR
                        "/configs/smoke.yaml --set trainer.sync=diloco --set diloco.inner_steps=4 "
                        "--set optimizer.lr=1e30");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(std::regex_match(
      o.err, std::regex("cumulus-train: error: training diverged at step [0-9]+ \\(loss "
                        "-?(nan|inf)\\); lower optimizer\\.lr or set trainer\\.grad_clip_norm "
                        "for the inner steps, or lower diloco\\.outer_lr \\(now 0\\.7\\) or "
                        "diloco\\.outer_momentum \\(now 0\\.9\\) for the outer ones\n")))
      << o.err;
}

// The training allocator is the default and says nothing; glibc's own is said on the first line,
// and a choice that does not exist exits 2 naming the allowed ones.
TEST_F(CliTest, TheAllocatorChoiceIsSaidWhenItIsNotTheDefault) {
  const std::string args = CUMULUS_SOURCE_DIR
                           "/configs/smoke.yaml --set trainer.max_steps=1 "
                           "--set trainer.run_dir=" +
                           (dir_ / "run").string() + " --overwrite";
  Outcome o = run(args, "-u CUMULUS_MALLOC -u GLIBC_TUNABLES");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out.rfind("model: ", 0), 0u) << o.out;
  o = run(args, "CUMULUS_MALLOC=default");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out.rfind("malloc: glibc's own thresholds (CUMULUS_MALLOC=default)\nmodel: ", 0), 0u)
      << o.out;
  o = run(args, "CUMULUS_MALLOC=tcmalloc");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: CUMULUS_MALLOC=tcmalloc: expected training (the "
            "default) or default\n");
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  Outcome o = run("");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "cumulus-train: error: CONFIG is required (see cumulus-train --help)\n");
  o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --frobnicate");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "cumulus-train: error: unknown flag --frobnicate (see cumulus-train --help)\n");
  o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --resme auto");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: unknown flag --resme; did you mean --resume? (see cumulus-train "
            "--help)\n");
}

TEST_F(CliTest, AMalformedNumberExitsTwoNamingTheFlag) {
  Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --preemption-grace 2x");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: --preemption-grace: expected a positive number of seconds, got "
            "\"2x\"\n");
  EXPECT_EQ(o.out, "");
  // The launcher's grace arrives in the environment and is checked the same way.
  o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "CUMULUS_PREEMPTION_GRACE=0");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: --preemption-grace: expected a positive number of seconds, got "
            "\"0\"\n");
}

TEST_F(CliTest, HelpPrintsTheFlagsOnStdoutAndExitsZero) {
  const Outcome o = run("--help");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(o.out.rfind("Trains one worker of an experiment", 0), 0u) << o.out;
  EXPECT_NE(o.out.find("Usage: cumulus-train [FLAGS] CONFIG\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  --resume auto|none|PATH "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  --overwrite "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("Exit status: 0 done, 1 failed, 2 a failure a retry repeats (usage, "
                       "config, disk), 75 preempted"),
            std::string::npos)
      << o.out;
}

TEST_F(CliTest, AGroupWorkerWithoutTheLauncherEnvironmentNamesTheMissingVariable) {
  const Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml",
                        "-u MASTER_ADDR -u MASTER_PORT WORLD_SIZE=2 RANK=0");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: MASTER_ADDR is not set: a worker of a group needs RANK, "
            "WORLD_SIZE, MASTER_ADDR and MASTER_PORT (start it with cumulus-run)\n");
}

TEST_F(CliTest, RankWithoutWorldSizeExitsTwoInsteadOfTrainingAlone) {
  const Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "RANK=0");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-train: error: RANK=0 is set but WORLD_SIZE is not: a worker of a group needs "
            "both (cumulus-run sets them); unset RANK to train alone\n");
  EXPECT_EQ(o.out, "");
}

TEST_F(CliTest, AGroupWorkerWhoseStoreIsDownSaysWhere) {
  // Port 1 on loopback: nothing listens there (and unprivileged tests cannot bind it).
  const Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set comm.timeout_seconds=0.3",
                        "WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("store 127.0.0.1:1 unreachable"), std::string::npos) << o.err;
}

// A wrong token fails the same way every time, so it is a set-up error (exit 2), which the
// launcher does not restart.
TEST_F(CliTest, AWrongJobTokenExitsTwo) {
  cumulus::comm::StoreServer store("127.0.0.1", 0, "the-right-token");
  const std::string port = std::to_string(store.port());
  const Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set comm.timeout_seconds=5",
                        "WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                            " CUMULUS_JOB_TOKEN=a-wrong-token");
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("store 127.0.0.1:" + port +
                       " rejected the call: wrong job token (x-cumulus-token); check "
                       "CUMULUS_JOB_TOKEN"),
            std::string::npos)
      << o.err;
}

TEST_F(CliTest, PrintConfigShowsTheResolvedOverrides) {
  const Outcome o =
      run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set optimizer.lr=0.125 --print-config");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("lr: 0.125"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("dataset: synthetic"), std::string::npos) << o.out;
}

// checkpoint.async false: each save is told and recorded as a background one is. They were
// written but never reported, so a later failure named an older checkpoint as the newest valid
// one and counted the failures before the save as still in a row.
TEST_F(CliTest, ForegroundCheckpointsAreReportedLikeBackgroundOnes) {
  const std::string run_dir = (dir_ / "run").string();
  const Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set trainer.run_dir=" + run_dir +
                        " --set checkpoint.every_steps=8 --set checkpoint.async=false");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::string metrics = slurp(run_dir + "/metrics.jsonl");
  for (const char* step : {"8", "16", "24", "32"}) {
    EXPECT_NE(o.out.find(std::string("checkpoint step ") + step + ": " + run_dir +
                         "/checkpoints/step-000000" + (step[1] ? "" : "0") + step + " (stall "),
              std::string::npos)
        << step << "\n"
        << o.out;
    EXPECT_NE(metrics.find(std::string("\"type\":\"checkpoint\",\"step\":") + step + ","),
              std::string::npos)
        << step << "\n"
        << metrics;
  }
}

TEST_F(CliTest, TrainsTheSmokeExperimentEndToEnd) {
  const std::string run_dir = (dir_ / "run").string();
  const Outcome o = run(CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set trainer.run_dir=" + run_dir);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(o.out.rfind("model: ", 0), 0u) << o.out;
  // Not a terminal: plain lines, no carriage returns.
  EXPECT_EQ(o.out.find('\r'), std::string::npos);
  const std::regex last_line(
      R"(test accuracy (0|1)\.\d{4} \(loss \d+\.\d{4}\) after \d+ epochs, \d+ steps, \d+\.\d s\n$)");
  EXPECT_TRUE(std::regex_search(o.out, last_line)) << o.out;
  for (const char* file : {"config.yaml", "metrics.jsonl", "model_state_dict.pt"}) {
    EXPECT_TRUE(fs::exists(run_dir + "/" + file)) << file;
  }
}

}  // namespace
