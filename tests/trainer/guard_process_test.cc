// Nothing lost: real cumulus-train (and cumulus-run) processes meeting a run directory that another
// job holds, one that holds another experiment's checkpoints, a disk that is full or read-only,
// and a checkpoint directory that cannot exist. The disks are real: a tmpfs of a chosen size,
// mounted in a private mount namespace (unshare -m) that disappears with the test's process, so
// these tests need root, as CI has; without it they are skipped, saying so.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "cumulus/run_directory.h"
#include "tests/test_dir.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::Args;
using cumulus::testing::Env;
using cumulus::testing::ProcessResult;
using cumulus::testing::runProcess;

using cumulus::testing::kTrain;

Env alone() { return cumulus::testing::aloneEnv(); }

std::string read(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Quotes `arg` for sh -c.
std::string quoted(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class GuardProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cumulus::testing::freshTestDir("guard"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // cumulus-train smoke.yaml (32 steps of 64 samples) in run directory `run`, with `extra`.
  Args train(const std::string& run, Args extra = {}) {
    Args argv = {kTrain, CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "--set",
                 "trainer.run_dir=" + (dir_ / run).string()};
    for (auto& e : extra) argv.push_back(std::move(e));
    return argv;
  }

  // Runs `argv` with a tmpfs of `kib` KiB mounted on `mount_point` (created), in a mount namespace
  // of its own; `read_only` remounts it read-only first, and `copy_in`, when given, is copied into
  // it. Skips the test when that is not allowed.
  ProcessResult onTmpfs(const fs::path& mount_point, int kib, bool read_only, const Args& argv,
                        const fs::path& copy_in = {}) {
    fs::create_directories(mount_point);
    std::string script = "mount -t tmpfs -o size=" + std::to_string(kib) + "k tmpfs " +
                         quoted(mount_point.string()) + " || exit 111; ";
    if (!copy_in.empty()) {
      script += "cp -a " + quoted(copy_in.string()) + " " + quoted(mount_point.string()) +
                "/ || exit 112; ";
    }
    if (read_only) script += "mount -o remount,ro " + quoted(mount_point.string()) + "; ";
    script += "exec";
    for (const std::string& a : argv) script += " " + quoted(a);
    ProcessResult r =
        runProcess({"unshare", "-m", "--propagation", "private", "sh", "-c", script}, alone());
    if (r.exit_code == 111 ||
        (r.exit_code == 1 && r.output.find("unshare failed") != std::string::npos)) {
      skipped_ = "a private tmpfs needs root (unshare -m, mount): " + r.output;
    }
    return r;
  }

  fs::path dir_;
  std::string skipped_;
};

// What the room check estimates for one checkpoint of smoke.yaml's model
// (trainer/run_checkpoints.cc checkRoom): the MLP 784-64-10 has 784 x 64 + 64 + 64 x 10 + 10 =
// 50890 float32 parameters and no buffers, SGD with momentum keeps one more copy of them, and 64
// KiB covers the rest.
constexpr uint64_t kSmokeCheckpoint = 2 * 4 * 50890 + 64 * 1024;
constexpr uint64_t kPage = 4096;  // a tmpfs allocates whole pages; the lock file takes one

uint64_t pagesOf(uint64_t bytes) { return (bytes + kPage - 1) / kPage; }

// The bytes as the room check writes them: "0.5 MiB (472656 bytes)".
std::string byteText(uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f MiB (%llu bytes)",
                static_cast<double>(bytes) / (1024.0 * 1024.0),
                static_cast<unsigned long long>(bytes));
  return text;
}

// What the room check's error ends with in cumulus-train.
const std::string kCheckpointDirHint =
    " (checkpoint.dir; by default <trainer.run_dir>/checkpoints)";

// The line cumulus-train ends with on stderr: "cumulus-train: error: ...".
std::string errorOf(const ProcessResult& r) {
  return cumulus::testing::lastAfter(r.output, "cumulus-train: error: ");
}

TEST_F(GuardProcessTest, ASecondJobInARunDirectoryIsRefusedNamingTheFirst) {
  std::promise<pid_t> first_step;
  std::atomic<pid_t> first_pid{0};
  ProcessResult first;
  std::thread holder([&] {
    bool told = false;
    first = runProcess(
        train("run", {"--set", "trainer.epochs=100000"}), alone(),
        [&](const std::string& line, pid_t pid) {
          if (!told && line.find("first step") != std::string::npos) {
            told = true;
            first_step.set_value(pid);
          }
        },
        300, [&](pid_t pid) { first_pid = pid; });
    if (!told) first_step.set_value(0);
  });
  std::future<pid_t> started = first_step.get_future();
  ASSERT_EQ(started.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  const pid_t pid = started.get();
  ASSERT_GT(pid, 0) << first.output;

  const ProcessResult second = runProcess(train("run"), alone());
  ::kill(-first_pid.load(), SIGKILL);
  holder.join();
  EXPECT_EQ(second.exit_code, 2) << second.output;
  const std::string error = errorOf(second);
  EXPECT_EQ(error.rfind((dir_ / "run").string() + " is in use by cumulus-train, pid " +
                            std::to_string(pid) + " on host ",
                        0),
            0u)
      << second.output;
  EXPECT_NE(error.find("wait for that job to end or stop it, or give this run another directory "
                       "(trainer.run_dir)"),
            std::string::npos)
      << error;
  EXPECT_EQ(second.output.find("first step"), std::string::npos) << second.output;

  // The first job died by SIGKILL: the next one takes the directory over and says from whom.
  const ProcessResult third = runProcess(train("run"), alone());
  EXPECT_EQ(third.exit_code, 0) << third.output;
  EXPECT_NE(third.output.find("note: took over " + (dir_ / "run").string() +
                              " from cumulus-train, pid " + std::to_string(pid) + " on host "),
            std::string::npos)
      << third.output;
}

TEST_F(GuardProcessTest, ASecondLauncherInARunDirectoryEndsWithExitTwo) {
  std::promise<void> first_step;
  std::atomic<pid_t> first_pid{0};
  std::thread holder([&] {
    bool told = false;
    runProcess(
        cumulus::testing::groupOf(1, (dir_ / "logs-a").string(),
                                  train("run", {"--set", "trainer.epochs=100000"})),
        alone(),
        [&](const std::string& line, pid_t) {
          if (!told && line.find("first step") != std::string::npos) {
            told = true;
            first_step.set_value();
          }
        },
        300, [&](pid_t pid) { first_pid = pid; });
    if (!told) first_step.set_value();
  });
  ASSERT_EQ(first_step.get_future().wait_for(std::chrono::seconds(120)), std::future_status::ready);
  const ProcessResult second =
      runProcess(cumulus::testing::groupOf(1, (dir_ / "logs-b").string(), train("run")), alone());
  ::kill(first_pid.load(), SIGTERM);  // the launcher stops its worker
  holder.join();
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_NE(second.output.find((dir_ / "run").string() + " is in use by cumulus-train, pid "),
            std::string::npos)
      << second.output;
}

TEST_F(GuardProcessTest, AnotherExperimentDoesNotOverwriteTheCheckpointsOfAUsedDirectory) {
  const Args every8 = {"--set", "checkpoint.every_steps=8"};
  const ProcessResult first = runProcess(train("run", every8), alone());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const fs::path newest = dir_ / "run" / "checkpoints" / "step-00000032";
  const std::string manifest = read(newest / "MANIFEST");
  ASSERT_FALSE(manifest.empty());
  const std::string old_digest =
      newestCheckpointOrigin((dir_ / "run/checkpoints").string())->state.config_digest;

  Args changed = every8;
  changed.insert(changed.end(), {"--set", "optimizer.lr=0.01"});
  const ProcessResult refused = runProcess(train("run", changed), alone());
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  const std::string error = refused.output.substr(refused.output.find("cumulus-train: error: "));
  const std::string expected_start =
      "cumulus-train: error: " + (dir_ / "run/checkpoints").string() +
      " holds checkpoints of another experiment (newest " + newest.string() + ", config digest " +
      old_digest + "; this experiment's is ";
  EXPECT_EQ(error.rfind(expected_start, 0), 0u) << error;
  EXPECT_NE(error.find("), which differs in 1 key:\n  optimizer.lr: 0.05 -> 0.01\nresume it with "
                       "--resume auto (and --allow-config-change to continue with the new "
                       "values); or start over in this directory with --overwrite (which removes "
                       "its checkpoints), or give the run another trainer.run_dir\n"),
            std::string::npos)
      << error;
  EXPECT_EQ(read(newest / "MANIFEST"), manifest);  // untouched

  // Under cumulus-run, which resumes by default, the worker refuses the checkpoint and lists the
  // changed key on the line below; the launcher's last line names the key, not only "in 1 key:".
  const ProcessResult launched =
      runProcess(cumulus::testing::groupOf(1, (dir_ / "logs").string(), train("run", changed),
                                           {"--run-id=guard"}),
                 alone());
  EXPECT_EQ(launched.exit_code, 2) << launched.output;
  const std::string last =
      launched.output.substr(launched.output.rfind('\n', launched.output.size() - 2) + 1);
  EXPECT_EQ(last,
            "cumulus-run: giving up: rank 0 failed (exit code 2), an error that a restart would "
            "repeat, so none was tried: cumulus-train: error: checkpoint " +
                newest.string() +
                ": the experiment differs from the one that wrote it in 1 key: optimizer.lr: "
                "0.05 -> 0.01 (see " +
                (dir_ / "logs/guard/gen0/rank0.log").string() + ")\n")
      << launched.output;

  // The same experiment again is no conflict (a rerun, or more logging).
  const ProcessResult same = runProcess(
      train("run", {"--set", "checkpoint.every_steps=8", "--set", "trainer.log_every_steps=4"}),
      alone());
  EXPECT_EQ(same.exit_code, 0) << same.output;

  const ProcessResult overwritten = runProcess(train("run",
                                                     [&] {
                                                       Args a = changed;
                                                       a.push_back("--overwrite");
                                                       return a;
                                                     }()),
                                               alone());
  EXPECT_EQ(overwritten.exit_code, 0) << overwritten.output;
  EXPECT_NE(overwritten.output.find("; removed 3 checkpoint directories, starting from step 0"),
            std::string::npos)
      << overwritten.output;
  const auto origin = newestCheckpointOrigin((dir_ / "run/checkpoints").string());
  ASSERT_TRUE(origin);
  EXPECT_NE(origin->state.config_digest, old_digest);
}

TEST_F(GuardProcessTest, ACheckpointDirectoryThatCannotExistStopsBeforeTraining) {
  const ProcessResult r =
      runProcess(train("run", {"--set", "checkpoint.dir=/proc/cumulus-ck"}), alone());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(errorOf(r),
            "cannot create /proc/cumulus-ck: No such file or directory; it must be a directory "
            "this job can write");
  EXPECT_EQ(r.output.find("first step"), std::string::npos) << r.output;
}

TEST_F(GuardProcessTest, AReadOnlyRunDirectoryStopsBeforeTraining) {
  const fs::path run = dir_ / "ro";
  const ProcessResult r = onTmpfs(run, 1024, true, train("ro"));
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(errorOf(r), "cannot open " + (run / "cumulus.lock").string() +
                            ": Read-only file system; " + run.string() +
                            " must be a directory this job can write");
}

TEST_F(GuardProcessTest, ADiskWithoutRoomForItsCheckpointsStopsBeforeTraining) {
  const fs::path ck = dir_ / "ck";
  const ProcessResult r =
      onTmpfs(ck, 64, false, train("run", {"--set", "checkpoint.dir=" + ck.string()}));
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // 64 KiB less the page of its lock file; not even one checkpoint and the next fit, so the only
  // way out is another disk.
  EXPECT_EQ(errorOf(r), ck.string() +
                            " has 0.1 MiB (61440 bytes) free, but keeping 3 checkpoints "
                            "of this model (checkpoint.keep) while the next one is "
                            "written takes up to " +
                            byteText(4 * kSmokeCheckpoint) + ", about " +
                            byteText(kSmokeCheckpoint) +
                            " each: choose a directory on a larger disk" + kCheckpointDirHint);
  EXPECT_EQ(r.output.find("first step"), std::string::npos) << r.output;
}

// A save writes its .tmp beside the checkpoints it keeps and removes the oldest only after the
// rename: with checkpoint.keep 3 the directory holds 4 at once. A disk that holds 2.5 used to pass
// a check for 2, and the run stopped at its third save; now it stops before the first step,
// saying what would fit. That lower keep then runs to the end.
TEST_F(GuardProcessTest, KeepingThreeCheckpointsOnADiskThatHoldsTwoAndAHalfIsRefusedUpFront) {
  const fs::path ck = dir_ / "ck";
  const uint64_t free = pagesOf(kSmokeCheckpoint * 5 / 2) * kPage;
  const int kib = static_cast<int>((free + kPage) / 1024);
  Args argv = train("run", {"--set", "checkpoint.dir=" + ck.string(), "--set",
                            "checkpoint.every_steps=8", "--set", "checkpoint.keep=3"});
  const ProcessResult r = onTmpfs(ck, kib, false, argv);
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(errorOf(r),
            ck.string() + " has " + byteText(free) +
                " free, but keeping 3 checkpoints of this model (checkpoint.keep) "
                "while the next one is written takes up to " +
                byteText(4 * kSmokeCheckpoint) + ", about " + byteText(kSmokeCheckpoint) +
                " each: lower checkpoint.keep to 1 (up to " + byteText(2 * kSmokeCheckpoint) +
                "), or choose a directory on a larger disk" + kCheckpointDirHint);
  EXPECT_EQ(r.output.find("first step"), std::string::npos) << r.output;

  argv.insert(argv.end(), {"--set", "checkpoint.keep=1"});
  const ProcessResult one = onTmpfs(ck, kib, false, argv);
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(one.output.find("failed"), std::string::npos) << one.output;
}

// Resuming from the only checkpoint in the directory: that checkpoint is room already (the saves
// replace it in turn), so a disk with exactly what the run needs besides it is enough; with
// checkpoint.keep 1 the check used to ask for two checkpoints' room besides it, and say "free
// space there". One page less is refused with advice that keeps the checkpoint: a lower keep, or
// a larger disk.
TEST_F(GuardProcessTest, AResumeFromTheOnlyCheckpointFitsADiskWithRoomForExactlyWhatItNeeds) {
  // The same experiment, run to its end keeping every checkpoint; the test keeps step 8 alone.
  const Args every8 = {"--set", "checkpoint.every_steps=8"};
  Args first = every8;
  first.insert(first.end(), {"--set", "checkpoint.keep=4"});
  ASSERT_EQ(runProcess(train("first", first), alone()).exit_code, 0);
  const fs::path saved = dir_ / "first/checkpoints/step-00000008";
  uint64_t existing = 0;  // as it lies on a tmpfs: whole pages, directories free
  for (const auto& file : fs::directory_iterator(saved)) {
    existing += pagesOf(fs::file_size(file.path())) * kPage;
  }
  ASSERT_LT(existing, kSmokeCheckpoint);
  const fs::path ck = dir_ / "ck";
  const auto kibFor = [&](uint64_t free) {
    return static_cast<int>((kPage + existing + free) / 1024);  // the lock file, the checkpoint
  };
  for (const uint64_t keep : {1, 3}) {
    SCOPED_TRACE("checkpoint.keep " + std::to_string(keep));
    // Before the first save: the old one; after m saves, the m new ones and the old one while
    // keep - m > 0; and the one being written.
    const uint64_t needed =
        std::max((keep - 1) * kSmokeCheckpoint + existing, keep * kSmokeCheckpoint) +
        kSmokeCheckpoint;
    const uint64_t free = pagesOf(needed - existing) * kPage;
    const std::string run = "run" + std::to_string(keep);
    Args argv = train(run, every8);
    argv.insert(argv.end(), {"--set", "checkpoint.keep=" + std::to_string(keep), "--set",
                             "checkpoint.dir=" + ck.string(), "--resume", "auto"});

    const ProcessResult short_by_a_page = onTmpfs(ck, kibFor(free - kPage), false, argv, saved);
    if (!skipped_.empty()) GTEST_SKIP() << skipped_;
    EXPECT_EQ(short_by_a_page.exit_code, 2) << short_by_a_page.output;
    const std::string lower = keep == 1 ? ""
                                        : "lower checkpoint.keep to 2 (up to " +
                                              byteText(3 * kSmokeCheckpoint) + "), or ";
    EXPECT_EQ(errorOf(short_by_a_page),
              ck.string() + " has " + byteText(free - kPage) + " free and " + byteText(existing) +
                  " in its checkpoint, which the saves replace in turn, so room for " +
                  byteText(free - kPage + existing) + "; but keeping " + std::to_string(keep) +
                  (keep == 1 ? " checkpoint" : " checkpoints") +
                  " of this model (checkpoint.keep) while the next one is written takes up to " +
                  byteText(needed) + ", about " + byteText(kSmokeCheckpoint) + " each: " + lower +
                  "move the directory with its checkpoints to a larger disk" + kCheckpointDirHint);

    const ProcessResult r = onTmpfs(ck, kibFor(free), false, argv, saved);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("resuming from " + (ck / "step-00000008").string()), std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("failed"), std::string::npos) << r.output;
    // It trained on from step 8 and saved 16, 24 and 32 there.
    const std::string metrics = read(dir_ / run / "metrics.jsonl");
    for (const std::string step : {"16", "24", "32"}) {
      EXPECT_NE(metrics.find("\"type\":\"checkpoint\",\"step\":" + step), std::string::npos)
          << step << "\n"
          << metrics;
    }
  }
}

// The room checked at the start can still go to someone else: here, after step 12's checkpoint,
// another writer fills the disk. Each failed save is reported, and the run stops at
// checkpoint.max_failures naming the newest valid checkpoint.
TEST_F(GuardProcessTest, SavesThatFillTheDiskAreReportedEachTimeThenStopTheRun) {
  const fs::path ck = dir_ / "ck";
  Args argv = {cumulus::testing::kTrainFaultsBinary, "--fault-fill-disk",
               "12:" + (ck / "filler").string(), "--"};
  // Saves in the foreground, so that step 12's is recorded before step 16's begins.
  const Args train_argv =
      train("run", {"--set", "checkpoint.every_steps=4", "--set", "checkpoint.max_failures=2",
                    "--set", "checkpoint.async=false", "--set", "checkpoint.dir=" + ck.string()});
  argv.insert(argv.end(), train_argv.begin() + 1, train_argv.end());  // the faults binary trains
  const ProcessResult r = onTmpfs(ck, 4096, false, argv);
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // Steps 4, 8 and 12 fit; 16 and 20 do not. Each failure is reported with the newest valid one.
  const std::string step12 = (ck / "step-00000012").string();
  for (const char* line :
       {"warning: checkpoint step 16 failed (1 in a row; the run stops at 2): saving checkpoint ",
        "warning: checkpoint step 20 failed (2 in a row; the run stops at 2): saving "
        "checkpoint "}) {
    const size_t at = r.output.find(line);
    ASSERT_NE(at, std::string::npos) << line << "\n" << r.output;
    const std::string rest = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_NE(rest.find("No space left on device"), std::string::npos) << rest;
    EXPECT_NE(rest.find("; the newest valid checkpoint is " + step12), std::string::npos) << rest;
  }
  const std::string error = errorOf(r);
  EXPECT_EQ(error.rfind("2 checkpoints in a row failed (checkpoint.max_failures), the last at step "
                        "20: saving checkpoint " +
                            (ck / "step-00000020").string() + " failed: ",
                        0),
            0u)
      << r.output;
  EXPECT_NE(error.find("; training stops so that no more work goes unsaved; the newest valid "
                       "checkpoint is " +
                       step12 +
                       " (--resume auto continues from it); free space there or make it "
                       "writable first"),
            std::string::npos)
      << error;
  const std::string metrics = read(dir_ / "run/metrics.jsonl");
  size_t records = 0;
  for (size_t at = 0;
       (at = metrics.find("\"type\":\"checkpoint_failed\"", at)) != std::string::npos; ++at) {
    ++records;
  }
  EXPECT_EQ(records, 2u) << metrics;
}

// When the run directory cannot take the trained weights at the end (here model_state_dict.pt is
// a directory), they are saved in the temporary directory instead, and the run says where: the
// same bytes that a run with a usable directory writes.
TEST_F(GuardProcessTest, TrainedWeightsTheRunDirectoryRefusesGoToTheTemporaryDirectory) {
  const ProcessResult usual = runProcess(train("usual"), alone());
  ASSERT_EQ(usual.exit_code, 0) << usual.output;
  const fs::path run = dir_ / "blocked";
  fs::create_directories(run / "model_state_dict.pt" / "occupied");
  const fs::path tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  Env env = alone();
  env.emplace_back("TMPDIR", tmp.string());
  const ProcessResult r = runProcess(train("blocked"), env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string prefix =
      "warning: cannot rename " + (run / "model_state_dict.pt.tmp").string() + " to " +
      (run / "model_state_dict.pt").string() + ": Is a directory; the trained weights are in ";
  const size_t at = r.output.find(prefix);
  ASSERT_NE(at, std::string::npos) << r.output;
  const size_t end = r.output.find('\n', at);
  const std::string line = r.output.substr(at, end - at);
  const std::string instead = " instead";
  ASSERT_GT(line.size(), prefix.size() + instead.size()) << line;
  ASSERT_EQ(line.substr(line.size() - instead.size()), instead) << line;
  const fs::path fallback =
      line.substr(prefix.size(), line.size() - prefix.size() - instead.size());
  EXPECT_EQ(fallback.parent_path(), tmp) << line;
  EXPECT_EQ(fallback.filename().string().rfind("cumulus-model_state_dict-", 0), 0u) << line;
  EXPECT_EQ(read(fallback), read(dir_ / "usual/model_state_dict.pt"));
  EXPECT_FALSE(fs::exists(run / "model_state_dict.pt.tmp"));
}

}  // namespace
}  // namespace cumulus::trainer
