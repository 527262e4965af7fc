// <cumulus/run_directory.h>: the run directory's lock and whose checkpoints a directory holds.
// The processes that meet over a lock are in guard_process_test.cc; here one process plays both.
#include "cumulus/run_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "proto/checkpoint.pb.h"

namespace cumulus {
namespace {

namespace fs = std::filesystem;

class RunDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("run_directory_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read(const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void writeState(const std::string& step_dir, const std::string& digest) {
    fs::create_directories(dir_ / step_dir);
    proto::CheckpointState state;
    state.set_config_digest(digest);
    std::ofstream out(dir_ / step_dir / "state.pb", std::ios::binary);
    ASSERT_TRUE(state.SerializeToOstream(&out));
  }
  static std::string host() {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    return name;
  }

  fs::path dir_;
};

TEST_F(RunDirectoryTest, ASecondHolderIsRefusedNamingTheFirst) {
  RunDirectoryLockOptions first;
  first.run_id = "job-a";
  first.program = "cumulus-train";
  RunDirectoryLock lock(dir_.string(), first);
  EXPECT_EQ(lock.path(), (dir_ / "cumulus.lock").string());
  EXPECT_EQ(lock.note(), "");
  const std::string record = read(dir_ / "cumulus.lock");
  EXPECT_NE(record.find("pid=" + std::to_string(::getpid()) + "\n"), std::string::npos) << record;
  EXPECT_NE(record.find("run_id=job-a\n"), std::string::npos) << record;

  RunDirectoryLockOptions second;
  second.run_id = "job-b";
  try {
    RunDirectoryLock again(dir_.string(), second);
    FAIL() << "a second lock was granted";
  } catch (const RunDirectoryBusy& e) {
    const std::string text = e.what();
    const std::string holder = dir_.string() + " is in use by cumulus-train, pid " +
                               std::to_string(::getpid()) + " on host " + host() + " since ";
    EXPECT_EQ(text.rfind(holder, 0), 0u) << text;
    EXPECT_NE(text.find(" (run id job-a): wait for that job to end or stop it, or give this run "
                        "another directory (trainer.run_dir)"),
              std::string::npos)
        << text;
    EXPECT_EQ(exitCodeFor(e), kUserErrorExitCode);
  }
}

TEST_F(RunDirectoryTest, TheSameJobWaitsOnlyAsLongAsItsOptionsSay) {
  RunDirectoryLockOptions options;
  options.run_id = "job-a";
  RunDirectoryLock lock(dir_.string(), options);
  options.same_run_wait = std::chrono::milliseconds(0);
  try {
    RunDirectoryLock again(dir_.string(), options);
    FAIL() << "a second lock was granted";
  } catch (const RunDirectoryBusy& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "(run id job-a), a process of this same job that did not exit within 0 s: "),
              std::string::npos)
        << e.what();
  }
}

TEST_F(RunDirectoryTest, ALockReleasedCleanlyLeavesNoNoteAndOneLeftByTheDeadIsTakenOver) {
  { RunDirectoryLock lock(dir_.string()); }
  EXPECT_EQ(read(dir_ / "cumulus.lock"), "");
  {
    RunDirectoryLock lock(dir_.string());
    EXPECT_EQ(lock.note(), "");
  }
  // What a holder killed by SIGKILL leaves: its record, and no flock (the kernel dropped it).
  std::ofstream(dir_ / "cumulus.lock") << "program=cumulus-train\npid=4242\nhost=node-1\n"
                                          "started=2026-11-26T09:30:01Z\nrun_id=old\n";
  RunDirectoryLock lock(dir_.string());
  EXPECT_EQ(lock.note(), "took over " + dir_.string() +
                             " from cumulus-train, pid 4242 on host node-1 (started "
                             "2026-11-26T09:30:01Z), which ended without releasing it");
}

TEST_F(RunDirectoryTest, AMovedLockIsHeldByItsNewOwner) {
  std::optional<RunDirectoryLock> moved;
  {
    RunDirectoryLock lock(dir_.string());
    moved.emplace(std::move(lock));
  }
  EXPECT_THROW(RunDirectoryLock(dir_.string()), RunDirectoryBusy);
  moved.reset();
  EXPECT_NO_THROW(RunDirectoryLock(dir_.string()));
}

TEST_F(RunDirectoryTest, ADirectoryThatCannotBeCreatedIsAUserError) {
  try {
    RunDirectoryLock lock("/proc/cumulus-run-dir");
    FAIL() << "locked a directory in /proc";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot create /proc/cumulus-run-dir: No such file or directory; it must be a "
              "directory this job can write");
  }
}

TEST_F(RunDirectoryTest, TheNewestCheckpointSaysWhoseTheDirectoryIs) {
  EXPECT_FALSE(newestCheckpointOrigin(dir_.string()));  // no directory at all
  writeState("step-00000008", "aaa");
  writeState("step-00000016", "bbb");
  fs::create_directories(dir_ / "step-00000024.tmp");  // an interrupted save is nobody's
  const std::optional<CheckpointOrigin> origin = newestCheckpointOrigin(dir_.string());
  ASSERT_TRUE(origin);
  EXPECT_EQ(origin->path, (dir_ / "step-00000016").string());
  EXPECT_EQ(origin->state.config_digest, "bbb");

  EXPECT_NO_THROW(checkSameExperiment(dir_.string(), "bbb", "choose"));
  try {
    checkSameExperiment(dir_.string(), "ccc", "resume it, or use another directory");
    FAIL() << "another experiment's checkpoints were accepted";
  } catch (const ExperimentMismatch& e) {
    EXPECT_EQ(std::string(e.what()),
              dir_.string() + " holds checkpoints of another experiment (newest " +
                  (dir_ / "step-00000016").string() +
                  ", config digest bbb; this experiment's is ccc): resume it, or use another "
                  "directory");
  }
}

}  // namespace
}  // namespace cumulus
