// Stop and resume with real processes: cumulus-train alone and in a cumulus-run group. Each run is
// a configs/smoke.yaml-sized job (a second or two); the final parameters are compared through the
// "final parameters sha256" line rank 0 prints (training_checkpoint.h parameterDigest).
// Faults: cumulus-train-faults --fault-sigterm-at-step S[:RANK] makes a worker raise SIGTERM at
// itself after step S (fault_parts.h SigtermAtStep), so the stop lands mid-run
// deterministically; the other faults are real (a SIGTERM from outside, SIGKILL of a worker, a
// corrupted file).
#include <gtest/gtest.h>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/test_dir.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"
#include "trainer/resume.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::digestOf;
using cumulus::testing::Env;
using cumulus::testing::lastAfter;
using cumulus::testing::ProcessResult;
using cumulus::testing::runProcess;
using cumulus::testing::withFaults;

using cumulus::testing::kTrain;

std::vector<std::string> sigtermAt(const std::string& step,
                                   const std::vector<std::string>& train_argv) {
  return withFaults({"--fault-sigterm-at-step", step}, train_argv);
}

// The environment of a worker started by hand (the test itself may run under a launcher).
Env alone(Env extra = {}) { return cumulus::testing::aloneEnv(std::move(extra)); }

class ResumeProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cumulus::testing::freshTestDir("resume"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // cumulus-train smoke.yaml with dropout, mid-epoch-friendly sizes (16 steps an epoch, 2 epochs),
  // a run directory of its own, and `extra` arguments.
  std::vector<std::string> train(const std::string& run, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {kTrain,  CUMULUS_SOURCE_DIR "/configs/smoke.yaml",
                                     "--set", "trainer.run_dir=" + (dir_ / run).string(),
                                     "--set", "model.dropout=0.25",
                                     "--set", "trainer.log_every_steps=4"};
    for (auto& e : extra) argv.push_back(std::move(e));
    return argv;
  }
  std::vector<std::string> group(int workers, std::vector<std::string> train_argv,
                                 std::vector<std::string> launch_flags = {}) {
    return cumulus::testing::groupOf(workers, (dir_ / "logs").string(), std::move(train_argv),
                                     std::move(launch_flags));
  }

  std::string ckpt(const std::string& run, int step) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08d", step);
    return (dir_ / run / "checkpoints" / name).string();
  }

  fs::path dir_;
};

TEST_F(ResumeProcessTest, OneWorkerStoppedAnywhereResumesBitIdentical) {
  const std::string expected = digestOf(runProcess(train("base", {"--resume", "none"}), alone()));
  // After the first step, mid-epoch, at the epoch boundary (16), and near the end.
  for (int stop : {1, 7, 16, 29}) {
    const std::string run = "stop" + std::to_string(stop);
    const ProcessResult first =
        runProcess(sigtermAt(std::to_string(stop), train(run, {"--resume", "auto"})), alone());
    ASSERT_EQ(first.exit_code, 75) << first.output;
    EXPECT_NE(first.output.find("preempted at step " + std::to_string(stop) + ", checkpoint " +
                                ckpt(run, stop)),
              std::string::npos)
        << first.output;
    const ProcessResult second = runProcess(train(run, {"--resume", "auto"}), alone());
    EXPECT_NE(
        second.output.find("resuming from " + ckpt(run, stop) + " at step " + std::to_string(stop)),
        std::string::npos)
        << second.output;
    EXPECT_EQ(digestOf(second), expected) << "stopped at step " << stop;
  }
}

TEST_F(ResumeProcessTest, AdamWithAccumulationAndClippingResumesBitIdentical) {
  const std::vector<std::string> sets = {
      "--set", "optimizer.name=adamw",        "--set", "optimizer.lr=0.003",
      "--set", "trainer.grad_accumulation=2", "--set", "trainer.grad_clip_norm=0.5"};
  auto with = [&](std::vector<std::string> more) {
    for (const auto& s : sets) more.push_back(s);
    return more;
  };
  const std::string expected =
      digestOf(runProcess(train("base", with({"--resume", "none"})), alone()));
  const ProcessResult first =
      runProcess(sigtermAt("11", train("x", with({"--resume", "auto"}))), alone());
  ASSERT_EQ(first.exit_code, 75) << first.output;
  EXPECT_EQ(digestOf(runProcess(train("x", with({"--resume", "auto"})), alone())), expected);
}

// A real SIGTERM from outside, whenever it lands: the run stops at the agreed step, within the
// grace, and the resumed run ends where the uninterrupted one does.
TEST_F(ResumeProcessTest, ExternalSigtermStopsCheckpointsAndExits75) {
  const std::vector<std::string> longer = {"--set", "trainer.epochs=12", "--set",
                                           "trainer.log_every_steps=1"};
  auto with = [&](std::vector<std::string> more) {
    for (const auto& s : longer) more.push_back(s);
    return more;
  };
  const std::string expected =
      digestOf(runProcess(train("base", with({"--resume", "none"})), alone()));
  bool sent = false;
  const ProcessResult first = runProcess(
      train("x", with({"--resume", "auto"})), alone(), [&](const std::string& line, pid_t pid) {
        if (!sent && line.find("step 20/") != std::string::npos) {
          sent = true;
          ::kill(pid, SIGTERM);
        }
      });
  ASSERT_TRUE(sent) << first.output;
  ASSERT_EQ(first.exit_code, 75) << first.output;
  const std::string at = lastAfter(first.output, "preempted at step ");
  ASSERT_FALSE(at.empty()) << first.output;
  const int step = std::stoi(at);
  EXPECT_GE(step, 20);
  EXPECT_LT(step, 192);
  EXPECT_EQ(digestOf(runProcess(train("x", with({"--resume", "auto"})), alone())), expected);
}

TEST_F(ResumeProcessTest, ConfigChangeIsRefusedUnlessAllowed) {
  ASSERT_EQ(runProcess(sigtermAt("5", train("x", {"--resume", "auto"})), alone()).exit_code, 75);
  const ProcessResult refused = runProcess(
      train("x", {"--resume", "auto", "--set", "optimizer.lr=0.01", "--set", "trainer.seed=9"}),
      alone());
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("cumulus-train: error: checkpoint " + ckpt("x", 5) +
                                ": the experiment differs from the one that wrote it in 2 keys:\n"
                                "  optimizer.lr: 0.05 -> 0.01\n  trainer.seed: 1 -> 9\n"
                                "rerun with --allow-config-change"),
            std::string::npos)
      << refused.output;
  const ProcessResult allowed = runProcess(
      train("x", {"--resume", "auto", "--allow-config-change", "--set", "optimizer.lr=0.01"}),
      alone());
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("config: optimizer.lr: 0.05 -> 0.01"), std::string::npos)
      << allowed.output;
}

TEST_F(ResumeProcessTest, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  const std::string expected = digestOf(runProcess(train("base", {"--resume", "none"}), alone()));
  const ProcessResult first = runProcess(
      sigtermAt("12", train("x", {"--resume", "auto", "--set", "checkpoint.every_steps=5"})),
      alone());
  ASSERT_EQ(first.exit_code, 75) << first.output;
  ASSERT_TRUE(fs::exists(ckpt("x", 10))) << first.output;
  {
    std::fstream model(ckpt("x", 12) + "/model.pt",
                       std::ios::in | std::ios::out | std::ios::binary);
    model.seekp(100);
    model.put('\x5a');
  }
  const ProcessResult second =
      runProcess(train("x", {"--resume", "auto", "--set", "checkpoint.every_steps=5"}), alone());
  EXPECT_NE(second.output.find("warning: " + ckpt("x", 12) + ": "), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("resuming from " + ckpt("x", 10) + " at step 10"), std::string::npos)
      << second.output;
  EXPECT_EQ(digestOf(second), expected);
}

// The warning about a corrupt newest checkpoint must survive a resume that is then refused, and
// a directory of only corrupt checkpoints must say so rather than "no checkpoint".
TEST_F(ResumeProcessTest, RejectedCheckpointsAreNamedWhenTheResumeFailsOrFindsNone) {
  const std::vector<std::string> every5 = {"--resume", "auto", "--set", "checkpoint.every_steps=5"};
  const ProcessResult first = runProcess(sigtermAt("12", train("x", every5)), alone());
  ASSERT_EQ(first.exit_code, 75) << first.output;
  auto corrupt = [&](int step) {
    std::fstream model(ckpt("x", step) + "/model.pt",
                       std::ios::in | std::ios::out | std::ios::binary);
    model.seekp(100);
    model.put('\x5a');
  };
  corrupt(12);
  std::vector<std::string> changed = every5;
  for (const char* s : {"--set", "optimizer.lr=0.01"}) changed.push_back(s);
  const ProcessResult refused = runProcess(train("x", changed), alone());
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("optimizer.lr"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("; newer checkpoint skipped: " + ckpt("x", 12) + ": "),
            std::string::npos)
      << refused.output;

  corrupt(10);
  corrupt(5);
  const ProcessResult none =
      runProcess(train("x", {"--resume", "auto", "--set", "trainer.max_steps=1"}), alone());
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("no valid checkpoint in " + (dir_ / "x" / "checkpoints").string() +
                             " (rejected: step-00000012, step-00000010, step-00000005): starting "
                             "from step 0"),
            std::string::npos)
      << none.output;
}

// Two workers under cumulus-run, stopped by a notice on one rank only, for each algorithm.
class GroupResumeTest : public ResumeProcessTest,
                        public ::testing::WithParamInterface<std::string> {};

TEST_P(GroupResumeTest, TwoWorkersStoppedAndResumedBitIdentical) {
  const std::vector<std::string> algo = {"--set", "comm.algorithm=" + GetParam()};
  auto with = [&](std::vector<std::string> more) {
    for (const auto& s : algo) more.push_back(s);
    return more;
  };
  const std::string expected =
      digestOf(runProcess(group(2, train("base", with({}))), {{"CUMULUS_RUN_ID", ""}}));
  const ProcessResult first = runProcess(group(2, sigtermAt("9:1", train("x", with({})))));
  ASSERT_EQ(first.exit_code, 75) << first.output;
  EXPECT_NE(first.output.find("preempted at step 9, checkpoint " + ckpt("x", 9)), std::string::npos)
      << first.output;
  const ProcessResult second = runProcess(group(2, train("x", with({}))));
  EXPECT_NE(second.output.find("resuming from " + ckpt("x", 9) + " at step 9"), std::string::npos)
      << second.output;
  EXPECT_EQ(digestOf(second), expected);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, GroupResumeTest, ::testing::Values("ring", "tree", "funnel"));

// 2 workers stopped mid-epoch, resumed by 1: every sample of every epoch is consumed exactly once
// by the steps that made the final model.
TEST_F(ResumeProcessTest, WorldSizeTwoToOneConsumesEverySampleOnce) {
  const std::string ledger = (dir_ / "ledger").string();
  const ProcessResult first = runProcess(
      group(2, withFaults({"--fault-sigterm-at-step", "9", "--sample-ledger", ledger}, train("x")),
            {"--recovery=restart"}));
  ASSERT_EQ(first.exit_code, 75) << first.output;
  const ProcessResult second = runProcess(
      withFaults({"--sample-ledger", ledger}, train("x", {"--resume", "auto"})), alone());
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("world size 2 -> 1: re-sharding each global batch of 64"),
            std::string::npos)
      << second.output;
  // The one worker runs the 64 samples as two micro-batches of 32, the size each of two ran.
  EXPECT_NE(second.output.find("trainer.grad_accumulation 1 -> 2 on 1 worker(s), so no "
                               "micro-batch outgrows the 32 samples of the run that wrote it"),
            std::string::npos)
      << second.output;
  SampleLedger book;
  for (const char* suffix : {".rank0", ".rank1"}) book.readFile(ledger + suffix);
  book.dropReplayedSteps();
  EXPECT_EQ(book.epochs(), (std::set<int64_t>{0, 1}));
  std::set<int64_t> all;
  for (int64_t i = 0; i < 1024; ++i) all.insert(i);  // 1024 samples, 16 full batches of 64
  for (int64_t epoch : {0, 1}) {
    const auto problems = book.checkEpoch(epoch, all);
    EXPECT_TRUE(problems.empty()) << problems.size() << " problems, first: " << problems[0];
  }
  EXPECT_EQ(book.records(), 9u * 2 + 23u);
}

// comm.compression bf16 keeps per-rank error-feedback residuals: a stop checkpoints every rank's
// (comm_residual.pt), and the group that resumes from it at the same world size ends bit-identical
// to one that never stopped. Without them the resumed ranks would start from zero residuals and
// drift by a bf16 rounding. A world of one sends nothing and says it drops them.
TEST_F(ResumeProcessTest, CompressedGroupResumesBitIdenticalWithItsResiduals) {
  const std::vector<std::string> bf16 = {"--set", "comm.compression=bf16", "--set",
                                         "comm.algorithm=ring"};
  auto with = [&](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const ProcessResult plain =
      runProcess(group(2, train("plain", {"--set", "comm.algorithm=ring"})));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const ProcessResult full = runProcess(group(2, train("full", bf16)));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NE(digestOf(full), digestOf(plain)) << "compression must change what is summed";
  std::ifstream metrics(dir_ / "full" / "metrics.jsonl");
  const std::string records((std::istreambuf_iterator<char>(metrics)), {});
  EXPECT_NE(records.find("\"world_size\":2,\"compression\":\"bf16\""), std::string::npos)
      << records;

  const ProcessResult first =
      runProcess(group(2, sigtermAt("9", train("part", bf16)), {"--recovery=restart"}));
  ASSERT_EQ(first.exit_code, 75) << first.output;
  EXPECT_TRUE(fs::exists(fs::path(ckpt("part", 9)) / "comm_residual.pt"));
  const ProcessResult second =
      runProcess(group(2, train("part", with(bf16, {"--resume", "auto"}))));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(digestOf(second), digestOf(full));

  const ProcessResult alone_resume =
      runProcess(train("part", with(bf16, {"--resume", ckpt("part", 9), "--set",
                                           "trainer.run_dir=" + (dir_ / "one").string()})),
                 alone());
  ASSERT_EQ(alone_resume.exit_code, 0) << alone_resume.output;
  EXPECT_NE(alone_resume.output.find("comm.compression: a world of one sends nothing; the "
                                     "checkpoint's error-feedback residuals are dropped"),
            std::string::npos)
      << alone_resume.output;
}

// trainer.sync diloco keeps every rank's replica, inner optimizer and residual
// (diloco_replicas.pt) and the outer momentum (diloco.pt): a group stopped mid-round, between two
// fragments' syncs, resumes bit-identical to one that never stopped. The replicas end identical
// (the last boundary syncs every fragment), and a world of one that resumes from it says that each
// rank starts the round from the global parameters.
TEST_F(ResumeProcessTest, DilocoGroupStoppedMidRoundResumesBitIdentical) {
  const std::vector<std::string> diloco = {
      "--set", "trainer.sync=diloco", "--set", "diloco.inner_steps=4",
      "--set", "diloco.fragments=2",  "--set", "diloco.outer_compression=int8",
      "--set", "diloco.overlap=true", "--set", "comm.algorithm=ring"};
  auto with = [&](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const ProcessResult full =
      runProcess(group(2, train("full", with(diloco, {"--set", "trainer.log_all_ranks=true"}))));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string expected = digestOf(full);
  EXPECT_EQ(cumulus::testing::everyDigest(full.output), std::vector<std::string>(2, expected))
      << "the replicas differ: " << full.output;
  std::ifstream metrics(dir_ / "full" / "metrics.jsonl");
  const std::string records((std::istreambuf_iterator<char>(metrics)), {});
  EXPECT_NE(records.find("\"outer_rounds\":"), std::string::npos) << records;

  const ProcessResult first =
      runProcess(group(2, sigtermAt("9", train("part", diloco)), {"--recovery=restart"}));
  ASSERT_EQ(first.exit_code, 75) << first.output;
  EXPECT_TRUE(fs::exists(fs::path(ckpt("part", 9)) / "diloco_replicas.pt"));
  EXPECT_TRUE(fs::exists(fs::path(ckpt("part", 9)) / "diloco.pt"));
  const ProcessResult second =
      runProcess(group(2, train("part", with(diloco, {"--resume", "auto"}))));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(digestOf(second), expected);

  const ProcessResult one =
      runProcess(train("part", with(diloco, {"--resume", ckpt("part", 9), "--set",
                                             "trainer.run_dir=" + (dir_ / "one").string()})),
                 alone());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("trainer.sync diloco: the checkpoint holds the replicas of 2 ranks "
                            "and this launch has 1: every rank starts the round from the global "
                            "parameters, with rank 0's inner optimizer"),
            std::string::npos)
      << one.output;
}

// True once `pid` catches SIGTERM (its handler is installed): /proc/PID/status SigCgt, bit 14.
bool catchesSigterm(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 14) & 1;
  }
  return false;
}

// A notice while a worker still waits for its group (here: a Store that is not there) must not
// keep it alive past --preemption-grace: the deadline covers start-up, not just the loop.
TEST_F(ResumeProcessTest, NoticeDuringStartUpExits75WithinTheGrace) {
  std::atomic<bool> stop{false};
  std::atomic<pid_t> child{0};
  std::thread notifier([&] {
    while (!stop && (child == 0 || !catchesSigterm(child))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!stop) ::kill(child, SIGTERM);
  });
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult r =
      runProcess(train("x", {"--preemption-grace", "1", "--set", "comm.timeout_seconds=60"}),
                 alone({{"WORLD_SIZE", "2"},
                        {"RANK", "1"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", "1"}}),
                 {}, 30, [&](pid_t pid) { child = pid; });
  stop = true;
  notifier.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("cumulus-train: preemption grace of 1.0 s ran out before this worker "
                          "could checkpoint and stop; exiting with code 75"),
            std::string::npos)
      << r.output;
  EXPECT_LT(seconds, 20);
}

std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  const std::string task = "/proc/" + std::to_string(parent) + "/task";
  for (const auto& entry : fs::directory_iterator(task)) {
    std::ifstream in(entry.path() / "children");
    for (pid_t pid; in >> pid;) out.push_back(pid);
  }
  return out;
}

// SIGKILL of one worker: cumulus-run restarts the group, which resumes from the newest checkpoint
// and ends with the parameters of a run that never failed.
TEST_F(ResumeProcessTest, KilledWorkerIsRestartedAndResumes) {
  const std::vector<std::string> sets = {"--set", "checkpoint.every_steps=4",
                                         "--set", "trainer.epochs=6",
                                         "--set", "trainer.log_every_steps=1"};
  auto with = [&](std::vector<std::string> more) {
    for (const auto& s : sets) more.push_back(s);
    return more;
  };
  const std::string expected = digestOf(runProcess(group(2, train("base", with({})))));
  bool killed = false;
  const ProcessResult run =
      runProcess(group(2, train("x", with({})), {"--max-restarts=2", "--recovery=restart"}), {},
                 [&](const std::string& line, pid_t launcher) {
                   if (!killed && line.find("checkpoint step 8:") != std::string::npos) {
                     const auto workers = childrenOf(launcher);
                     if (workers.empty()) return;
                     killed = true;
                     ::kill(workers.back(), SIGKILL);
                   }
                 });
  ASSERT_TRUE(killed) << run.output;
  EXPECT_NE(run.output.find("resuming from " + (dir_ / "x" / "checkpoints").string()),
            std::string::npos)
      << run.output;
  EXPECT_EQ(digestOf(run), expected);

  // The goodput of the whole run, both launches: the restart between them is counted, and the
  // categories split the wall time, which covers every record of the run.
  std::ifstream metrics(dir_ / "x" / "metrics.jsonl");
  std::string line;
  double first_time = 0;
  nlohmann::json last;
  while (std::getline(metrics, line)) {
    const auto record = nlohmann::json::parse(line);
    if (first_time == 0) first_time = record["time"].get<double>();
    if (record["type"] == "goodput") last = record;
  }
  ASSERT_TRUE(last.is_object());
  EXPECT_EQ(last["step"], 96);
  EXPECT_GT(last["restart_s"].get<double>(), 0.0) << last;
  EXPECT_GE(last["redone_s"].get<double>(), 0.0) << last;
  double parts = 0;
  for (const char* key : {"startup_s", "training_s", "comm_wait_s", "evaluation_s", "checkpoint_s",
                          "reform_s", "restart_s", "redone_s", "other_s"}) {
    parts += last[key].get<double>();
  }
  EXPECT_NEAR(parts, last["wall_s"].get<double>(), 1e-6) << last;
  EXPECT_GE(last["wall_s"].get<double>(), last["time"].get<double>() - first_time) << last;
}

}  // namespace
}  // namespace cumulus::trainer
