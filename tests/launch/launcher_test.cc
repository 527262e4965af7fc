// cumulus-run started as users start it, with real worker processes (small shell scripts) and
// real signals. Each test gets its own temp directory and cleans up after itself.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "comm/store_client.h"
#include "comm/store_keys.h"
#include "tests/launch/free_port.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace {

using cumulus::testing::kRun;
using cumulus::testing::readFile;

struct Result {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cumulus-launch-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes an executable shell script and returns its path.
  std::string script(const std::string& name, const std::string& body) {
    fs::path p = dir_ / name;
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  }

  // Runs cumulus-run with `args` (shell words), output to a file, and waits for it.
  Result launch(const std::string& args, const std::string& env = "") {
    fs::path out = dir_ / "launcher.out";
    auto t0 = std::chrono::steady_clock::now();
    std::string cmd = env + " " + kRun + " --log-dir " + (dir_ / "logs").string() + " " + args +
                      " >" + out.string() + " 2>&1";
    int status = std::system(cmd.c_str());
    Result r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.output = readFile(out);
    return r;
  }

  // Runs `args` as node 1 in the background (token "tok", its own log dir) and as node 0 in the
  // foreground, and returns both results once both have exited.
  std::pair<Result, Result> launchTwoNodes(const std::string& common, const std::string& worker) {
    fs::path out1 = dir_ / "node1.out";
    std::string node1 = "CUMULUS_JOB_TOKEN=tok " + kRun + " --log-dir " +
                        (dir_ / "logs1").string() + " " + common + " --node-rank 1 -- " + worker +
                        " >" + out1.string() + " 2>&1";
    pid_t other = ::fork();
    if (other < 0) {
      ADD_FAILURE() << "fork failed";
      return {};
    }
    if (other == 0) {
      ::execl("/bin/sh", "sh", "-c", node1.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    Result r0 = launch(common + " --node-rank 0 -- " + worker, "CUMULUS_JOB_TOKEN=tok");
    int status = 0;
    ::waitpid(other, &status, 0);
    Result r1;
    r1.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r1.output = readFile(out1);
    return {r0, r1};
  }

  fs::path dir_;
};

using cumulus::testing::freePort;

bool processAlive(pid_t pid) { return ::kill(pid, 0) == 0; }

bool endsWith(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// Blocks until `pid` (not a child of ours) has exited, up to `seconds`; returns whether it did.
// A pidfd is readable once the process is gone.
bool waitGone(pid_t pid, double seconds) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(seconds * 1000));
  ::close(fd);
  return ready == 1;
}

// cumulus-run in the background, its output on a pipe read line by line; SIGKILLed and reaped at
// the end of the scope if still running.
class BackgroundLaunch {
 public:
  explicit BackgroundLaunch(const std::string& command) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    const std::string line = "exec " + command;  // no allocation between fork() and exec
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~BackgroundLaunch() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  pid_t pid() const { return pid_; }
  // SIGKILLs it and reaps it.
  void kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // The next line of output that contains `text`, or "" at end of output or after `seconds`.
  std::string waitForLine(const std::string& text, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      for (size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
        const std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (line.find(text) != std::string::npos) return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char chunk[4096];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return "";
      pending_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_;
};

TEST_F(LauncherTest, WorkersGetTheTorchrunEnvironmentAndPrefixedOutput) {
  std::string w = script("env.sh",
                         "echo \"rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE "
                         "lws=$LOCAL_WORLD_SIZE group=$GROUP_RANK gen=$CUMULUS_GENERATION "
                         "restarts=$CUMULUS_RESTART_COUNT run=$CUMULUS_RUN_ID\"\n"
                         "test -n \"$MASTER_ADDR\" && test -n \"$MASTER_PORT\" && "
                         "test ${#CUMULUS_JOB_TOKEN} -ge 16 && echo rendezvous-ok");
  Result r = launch("--nproc-per-node 2 --run-id envjob -- " + w);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("[rank0] rank=0 local=0 world=2 lws=2 group=0 gen=0 restarts=0 run=envjob"),
      std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("[rank1] rank=1 local=1 world=2 lws=2 group=0 gen=0 restarts=0 run=envjob"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank1] rendezvous-ok"), std::string::npos) << r.output;
  // Each rank also has its own log file, unprefixed.
  std::string log1 = readFile(dir_ / "logs/envjob/gen0/rank1.log");
  EXPECT_EQ(log1,
            "rank=1 local=1 world=2 lws=2 group=0 gen=0 restarts=0 run=envjob\nrendezvous-ok\n");
}

TEST_F(LauncherTest, CrashRestartsTheGroupUnderANewGeneration) {
  // Rank 1 fails in generation 0 only; the restarted group succeeds.
  std::string w =
      script("flaky.sh",
             "if [ \"$RANK\" = 1 ] && [ \"$CUMULUS_GENERATION\" = 0 ]; then exit 3; fi\n"
             "echo done gen=$CUMULUS_GENERATION restarts=$CUMULUS_RESTART_COUNT");
  Result r =
      launch("--nproc-per-node 2 --run-id flaky --max-restarts 3 --recovery restart -- " + w);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: rank 1 failed (exit code 3); stopping the group"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cumulus-run: restarting the group (restart 1 of 3)"), std::string::npos);
  EXPECT_NE(r.output.find("[rank0] done gen=1 restarts=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1] done gen=1 restarts=1"), std::string::npos) << r.output;
  std::string errors = readFile(dir_ / "logs/flaky/errors.jsonl");
  EXPECT_TRUE(std::regex_search(
      errors, std::regex(R"(^\{"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ","run_id":"flaky",)"
                         R"("generation":0,"rank":1,"local_rank":1,"node_rank":0,"pid":\d+,)"
                         R"("exit_code":3,"log":".*/gen0/rank1.log"\}\n$)")))
      << errors;
}

// Recovery in place is the default, but a program that does not recover in place (a script, a
// user's own loop) never forms an in-place group: its failure restarts the group as before.
TEST_F(LauncherTest, AProgramThatDoesNotRecoverInPlaceIsRestarted) {
  std::string w =
      script("flaky.sh",
             "if [ \"$RANK\" = 1 ] && [ \"$CUMULUS_GENERATION\" = 0 ]; then exit 3; fi\n"
             "echo done gen=$CUMULUS_GENERATION recovery=$CUMULUS_RECOVERY");
  Result r = launch("--nproc-per-node 2 --run-id flaky --max-restarts 3 -- " + w);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: the workers of generation 0 did not form an in-place "
                          "group (the program does not recover in place, or it failed before it "
                          "could); restarting the group instead"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cumulus-run: restarting the group (restart 1 of 3)"), std::string::npos)
      << r.output;
  // From then on the job runs as with --recovery restart.
  EXPECT_NE(r.output.find("[rank0] done gen=1 recovery=\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1] done gen=1 recovery=\n"), std::string::npos) << r.output;
}

TEST_F(LauncherTest, GivesUpAfterMaxRestartsNamingTheRank) {
  std::string w = script("bad.sh", "if [ \"$RANK\" = 1 ]; then exit 7; fi\nexec sleep 30");
  Result r = launch("--nproc-per-node 2 --run-id bad --max-restarts 1 --stop-grace 5 -- " + w);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: giving up: rank 1 failed (exit code 7) and no restarts are "
                          "left (--max-restarts 1)"),
            std::string::npos)
      << r.output;
  // The sleeping rank 0 was stopped (SIGTERM) each time, not waited for.
  EXPECT_LT(r.seconds, 15.0);
  std::string errors = readFile(dir_ / "logs/bad/errors.jsonl");
  EXPECT_EQ(std::count(errors.begin(), errors.end(), '\n'), 2) << errors;
}

// Exit code 2 is a worker's usage or configuration error: a restart would repeat it, so the
// launcher gives up at once, with that code, whatever --max-restarts allows.
TEST_F(LauncherTest, UsageErrorIsNotRestarted) {
  std::string w = script("usage.sh", "if [ \"$RANK\" = 1 ]; then exit 2; fi\nexec sleep 30");
  Result r = launch("--nproc-per-node 2 --run-id usage --max-restarts 3 --stop-grace 5 -- " + w);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: giving up: rank 1 failed (exit code 2), an error in the "
                          "command or the experiment that a restart would repeat; fix it and "
                          "launch again (see "),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << r.output;
  std::string errors = readFile(dir_ / "logs/usage/errors.jsonl");
  EXPECT_EQ(std::count(errors.begin(), errors.end(), '\n'), 1) << errors;
}

// A worker's error whose first line ends "differs in 1 key:" and lists the key below it, as
// cumulus-train's for a run directory of another experiment: the launcher's last line names the
// key too, not only the line before it.
TEST_F(LauncherTest, APermanentErrorOfSeveralLinesIsRepeatedWithItsIndentedLines) {
  std::string w = script(
      "keys.sh",
      "if [ \"$RANK\" = 1 ]; then printf 'step 1\\nw: error: runs/x holds checkpoints of "
      "another experiment, which differs in 1 key:\\n  optimizer.lr: 0.05 -> 0.01\\nresume it "
      "with --resume auto\\n' >&2; exit 2; fi\nexec sleep 30");
  Result r = launch("--nproc-per-node 2 --run-id keys --max-restarts 3 --recovery restart -- " + w);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(endsWith(r.output,
                       "cumulus-run: giving up: rank 1 failed (exit code 2), an error that a "
                       "restart would repeat, so none was tried: w: error: runs/x holds "
                       "checkpoints of another experiment, which differs in 1 key: optimizer.lr: "
                       "0.05 -> 0.01 (see " +
                           (dir_ / "logs/keys/gen0/rank1.log").string() + ")\n"))
      << r.output;
}

TEST_F(LauncherTest, WorkerKilledBySignalIsRecorded) {
  std::string w = script("kill.sh", "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi\nexit 0");
  Result r = launch("--nproc-per-node 2 --run-id sig --max-restarts 0 -- " + w);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 0 failed (signal SIGKILL)"), std::string::npos) << r.output;
  EXPECT_NE(readFile(dir_ / "logs/sig/errors.jsonl").find("\"signal\":\"SIGKILL\""),
            std::string::npos);
}

// A command that cannot be executed fails the same way every time: no restart, whatever
// --max-restarts allows (recovery in place, the default, included), and the last line says why.
TEST_F(LauncherTest, AProgramThatCannotBeExecutedIsNotRestarted) {
  Result r = launch("--nproc-per-node 1 --max-restarts 3 --run-id nox -- /nonexistent/worker");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string cannot =
      "[rank0] cumulus-run: cannot execute /nonexistent/worker: No such "
      "file or directory\n";
  EXPECT_NE(r.output.find(cannot), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(cannot), r.output.rfind(cannot)) << "tried more than once";
  EXPECT_EQ(r.output.find("restart"), std::string::npos) << r.output;
  EXPECT_TRUE(endsWith(r.output,
                       "cumulus-run: giving up: rank 0 failed (exit code 127): cannot "
                       "execute /nonexistent/worker: No such file or directory; fix "
                       "the command and launch again (see " +
                           (dir_ / "logs/nox/gen0/rank0.log").string() + ")\n"))
      << r.output;
}

TEST_F(LauncherTest, NoWorkerSurvivesTheLauncherBeingKilled) {
  std::string pids = (dir_ / "pids").string();
  std::string w = script("sleeper.sh", "echo $$ >> " + pids + "\nexec sleep 60");
  std::string cmd = kRun + " --log-dir " + (dir_ / "logs").string() + " --nproc-per-node 2 -- " +
                    w + " >/dev/null 2>&1";
  const std::string line = "exec " + cmd;  // no allocation between fork() and exec
  pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until both workers have written their pids.
  std::vector<pid_t> workers;
  for (int i = 0; i < 200 && workers.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    workers.clear();
    std::ifstream in(pids);
    for (pid_t p; in >> p;) workers.push_back(p);
  }
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t p : workers) ASSERT_TRUE(processAlive(p));
  ::kill(launcher, SIGKILL);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  // PR_SET_PDEATHSIG delivers SIGKILL to each worker; they are reaped by init shortly after.
  bool all_gone = false;
  for (int i = 0; i < 100 && !all_gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    all_gone = true;
    for (pid_t p : workers) {
      std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
      std::string content;
      std::getline(stat, content);
      // Gone, or a zombie waiting for init to reap it.
      bool alive = !content.empty() && content.find(") Z ") == std::string::npos;
      all_gone &= !alive;
    }
  }
  EXPECT_TRUE(all_gone) << "a worker outlived its launcher";
  for (pid_t p : workers) ::kill(p, SIGKILL);
}

// The workers' own children (a data loader, `sleep 600 &` in a worker script) die with the
// launcher too, even when it is SIGKILLed and has no chance to stop anything.
TEST_F(LauncherTest, KillingTheLauncherTakesTheWorkersChildrenDown) {
  const std::string w = script("parent.sh", "sleep 600 &\necho worker $$ child $!\nwait");
  BackgroundLaunch run(kRun + " --log-dir " + (dir_ / "logs").string() + " --nproc-per-node 2 -- " +
                       w);
  std::vector<pid_t> pids;
  for (int worker = 0; worker < 2; ++worker) {
    const std::string line = run.waitForLine("] worker ", 30);
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(\[rank\d\] worker (\d+) child (\d+))")))
        << line;
    pids.push_back(std::stoi(m[1]));
    pids.push_back(std::stoi(m[2]));
  }
  for (pid_t p : pids) ASSERT_TRUE(processAlive(p)) << p;
  run.kill();
  for (pid_t p : pids) {
    EXPECT_TRUE(waitGone(p, 10)) << "process " << p << " outlived its launcher";
  }
  for (pid_t p : pids) ::kill(p, SIGKILL);
}

// Starts cumulus-run in the background with workers that report readiness through files
// ready.<rank>, and returns its pid once every worker is ready.
pid_t startInBackground(const std::string& cmd, const std::string& ready, int workers) {
  const std::string line = "exec " + cmd;  // no allocation between fork() and exec
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 400; ++i) {
    bool all = true;
    for (int r = 0; r < workers; ++r) all &= fs::exists(ready + "." + std::to_string(r));
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return pid;
}

int waitExitCode(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class PreemptionTest : public LauncherTest {
 protected:
  std::string worker(const std::string& on_term) {
    ready_ = (dir_ / "ready").string();
    return script("w.sh", "trap '" + on_term + "' TERM\ntouch " + ready_ +
                              ".$RANK\nwhile true; do sleep 0.05; done");
  }
  std::string cmd(const std::string& flags, const std::string& w) {
    return kRun + " --log-dir " + (dir_ / "logs").string() + " --nproc-per-node 2 " + flags +
           " -- " + w + " >" + (dir_ / "out").string() + " 2>&1";
  }
  std::string out() { return readFile(dir_ / "out"); }
  std::string ready_;
};

const char* kCheckpointAndExit =
    "echo preempted at step 7, checkpoint /ckpt/step-00000007; exit 75";

TEST_F(PreemptionTest, SigtermToTheLauncherIsANoticeAndReportsTheCheckpoint) {
  std::string w = worker(kCheckpointAndExit);
  pid_t launcher = startInBackground(cmd("", w), ready_, 2);
  ::kill(launcher, SIGTERM);
  EXPECT_EQ(waitExitCode(launcher), 75) << out();
  EXPECT_NE(out().find("cumulus-run: preemption notice (SIGTERM); asking the workers to checkpoint "
                       "and stop within 25.0 s"),
            std::string::npos)
      << out();
  EXPECT_NE(out().find("[rank1] preempted at step 7, checkpoint /ckpt/step-00000007"),
            std::string::npos);
  EXPECT_NE(out().find("cumulus-run: preempted at step 7, checkpoint /ckpt/step-00000007 (notice "
                       "to exit "),
            std::string::npos)
      << out();
}

// A notice that comes before the group can agree on a step (a worker still loading LibTorch dies
// of the SIGTERM itself; its peer then fails on the lost connection) is still a preemption: no
// newer checkpoint exists, the previous one is resumed, and the launcher says so with 75.
TEST_F(PreemptionTest, NoticeBeforeTheWorkersCanCheckpointIsStillAPreemption) {
  ready_ = (dir_ / "ready").string();
  std::string w = script("early.sh", "if [ \"$RANK\" = 1 ]; then trap 'exit 1' TERM; fi\ntouch " +
                                         ready_ + ".$RANK\nwhile true; do sleep 0.05; done");
  pid_t launcher = startInBackground(cmd("", w), ready_, 2);
  ::kill(launcher, SIGTERM);
  EXPECT_EQ(waitExitCode(launcher), 75) << out();
  EXPECT_NE(out().find("cumulus-run: preempted before the workers could checkpoint (rank 0: "
                       "signal SIGTERM; notice to exit "),
            std::string::npos)
      << out();
  EXPECT_NE(out().find("the next launch resumes from the newest valid checkpoint"),
            std::string::npos)
      << out();
}

TEST_F(PreemptionTest, NoticeFileTriggersTheSameProtocol) {
  std::string notice = (dir_ / "notice").string();
  std::string w = worker(kCheckpointAndExit);
  pid_t launcher = startInBackground(cmd("--preemption-notice file:" + notice, w), ready_, 2);
  std::ofstream(notice) << "";
  EXPECT_EQ(waitExitCode(launcher), 75) << out();
  EXPECT_NE(out().find("cumulus-run: preemption notice (notice file " + notice + ")"),
            std::string::npos)
      << out();
  EXPECT_NE(out().find("cumulus-run: preempted at step 7"), std::string::npos) << out();
}

TEST_F(PreemptionTest, WorkersThatOverrunTheGraceAreKilledAndTheRunStaysResumable) {
  std::string w = worker("echo writing a slow checkpoint");  // ignores the notice
  pid_t launcher = startInBackground(cmd("--preemption-grace 0.5", w), ready_, 2);
  auto t0 = std::chrono::steady_clock::now();
  ::kill(launcher, SIGTERM);
  EXPECT_EQ(waitExitCode(launcher), 75) << out();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_NE(out().find("cumulus-run: preempted, but the workers had not exited after the 0.5 s "
                       "grace and were killed; the newest valid checkpoint is the one before"),
            std::string::npos)
      << out();
}

// The cloud metadata protocols are tested against fake servers in cloud_notice_test.cc.

TEST_F(PreemptionTest, ANoticeSpecTypoIsAUsageError) {
  Result r = launch("--preemption-notice htp://x -- /bin/true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "cumulus-run: error: --preemption-notice: expected aws, gcp, azure, auto, file:PATH "
            "or url:http://…, got \"htp://x\"\n");
}

TEST_F(LauncherTest, PortInUseIsAClearError) {
  Result r;
  int port = 0;
  {
    const cumulus::testing::BusyPort busy;
    ASSERT_NE(busy.port(), 0);
    port = busy.port();
    r = launch("--rdzv-endpoint 127.0.0.1:" + std::to_string(port) + " -- /bin/true");
  }
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: error: cannot host the rendezvous Store on 127.0.0.1:" +
                          std::to_string(port)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("choose another with --rdzv-endpoint"), std::string::npos) << r.output;
  // In cumulus-run's own terms: it has no --port flag, and gRPC's log lines stay out.
  EXPECT_EQ(r.output.find("--port"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("chttp2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Address already in use"), std::string::npos) << r.output;
}

TEST_F(LauncherTest, UnreachableRendezvousFailsWithinItsTimeout) {
  int port = freePort();
  Result r = launch("--nnodes 2 --node-rank 1 --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
                        " --rdzv-timeout 1 -- /bin/true",
                    "CUMULUS_JOB_TOKEN=secret");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: error: rendezvous failed: "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 10.0);
}

TEST_F(LauncherTest, BadFlagIsExitTwoWithTheFlagNamed) {
  Result r = launch("--nproc-per-node two -- /bin/true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(
      r.output,
      "cumulus-run: error: --nproc-per-node: expected an integer in [1, 1024], got \"two\"\n");
}

TEST_F(LauncherTest, AFailureOnOneNodeRestartsBothNodes) {
  int port = freePort();
  std::string w =
      script("flaky.sh",
             "if [ \"$RANK\" = 3 ] && [ \"$CUMULUS_GENERATION\" = 0 ]; then exit 5; fi\n"
             "if [ \"$CUMULUS_GENERATION\" = 0 ]; then exec sleep 30; fi\n"
             "echo rank=$RANK gen=$CUMULUS_GENERATION");
  std::string common =
      "--nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
      " --rdzv-timeout 20 --stop-grace 2 --run-id fl2 --recovery restart";
  auto [r0, r1] = launchTwoNodes(common, w);
  const std::string& o1 = r1.output;
  EXPECT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_EQ(r1.exit_code, 0) << o1;
  EXPECT_NE(o1.find("cumulus-run: rank 3 failed (exit code 5); stopping the group"),
            std::string::npos)
      << o1;
  EXPECT_NE(r0.output.find("cumulus-run: rank 3 failed (exit code 5) on another node; stopping"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r0.output.find("[rank0] rank=0 gen=1"), std::string::npos) << r0.output;
  EXPECT_NE(o1.find("[rank3] rank=3 gen=1"), std::string::npos) << o1;
  EXPECT_LT(r0.seconds, 20.0);
}

// A permanent failure on one node (exit code 2) ends the job on every node, with exit code 2 and
// no restart.
TEST_F(LauncherTest, APermanentFailureOnOneNodeEndsTheJobOnBoth) {
  int port = freePort();
  std::string w = script("perm.sh",
                         "if [ \"$RANK\" = 3 ]; then echo 'w: error: diverged'; exit 2; fi\n"
                         "exec sleep 30");
  std::string common =
      "--nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
      " --rdzv-timeout 20 --stop-grace 20 --max-restarts 3 --run-id perm2 --recovery restart";
  auto [r0, r1] = launchTwoNodes(common, w);
  EXPECT_EQ(r1.exit_code, 2) << r1.output;
  EXPECT_EQ(r0.exit_code, 2) << r0.output;
  EXPECT_TRUE(endsWith(r1.output,
                       "cumulus-run: giving up: rank 3 failed (exit code 2), an error "
                       "that a restart would repeat, so none was tried: w: error: "
                       "diverged (see " +
                           (dir_ / "logs1/perm2/gen0/rank3.log").string() + ")\n"))
      << r1.output;
  EXPECT_TRUE(endsWith(r0.output,
                       "cumulus-run: giving up: rank 3 failed (exit code 2) on another "
                       "node, an error that a restart would repeat; that node's "
                       "launcher names it\n"))
      << r0.output;
  EXPECT_EQ(r0.output.find("restarting"), std::string::npos) << r0.output;
  EXPECT_EQ(r1.output.find("restarting"), std::string::npos) << r1.output;
  EXPECT_LT(r0.seconds, 15.0);  // no --stop-grace wait, no rendezvous timeout
}

TEST_F(LauncherTest, TwoNodesOnLoopbackFormOneJob) {
  int port = freePort();
  std::string w = script("ranks.sh", "echo rank=$RANK of $WORLD_SIZE group=$GROUP_RANK");
  std::string common =
      "--nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
      " --rdzv-timeout 20 --run-id two";
  auto [r0, r1] = launchTwoNodes(common, w);
  const std::string& o1 = r1.output;
  EXPECT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_EQ(r1.exit_code, 0) << o1;
  EXPECT_NE(r0.output.find("[rank0] rank=0 of 4 group=0"), std::string::npos) << r0.output;
  EXPECT_NE(r0.output.find("[rank1] rank=1 of 4 group=0"), std::string::npos) << r0.output;
  EXPECT_NE(o1.find("[rank2] rank=2 of 4 group=1"), std::string::npos) << o1;
  EXPECT_NE(o1.find("[rank3] rank=3 of 4 group=1"), std::string::npos) << o1;
}

}  // namespace

namespace {

class LauncherExperimentTest : public LauncherTest {};

TEST_F(LauncherExperimentTest, LaunchSectionOfTheExperimentAppliesAndFlagsWin) {
  fs::path yaml = dir_ / "exp.yaml";
  std::ofstream(yaml) << "name: exp\nlaunch:\n  nproc_per_node: 3\n  max_restarts: 0\n";
  std::string w = script("w.sh", "echo world=$WORLD_SIZE ps=${CUMULUS_PS_ENDPOINT:-none}");
  Result r = launch("-- " + w + " " + yaml.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank2] world=3 ps=none"), std::string::npos) << r.output;
  // A flag wins over the YAML, and the command's own --set reaches the launcher too.
  r = launch("--nproc-per-node 2 -- " + w + " " + yaml.string() + " --set comm.algorithm=funnel");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank1] world=2 ps=127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank2]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: parameter server (funnel) on 127.0.0.1:"),
            std::string::npos)
      << r.output;
}

TEST_F(LauncherExperimentTest, BadExperimentFailsBeforeAnyWorkerStarts) {
  fs::path yaml = dir_ / "bad.yaml";
  std::ofstream(yaml) << "name: bad\nlaunch:\n  nproc_per_nod: 3\n";
  std::string marker = (dir_ / "started").string();
  std::string w = script("w.sh", "touch " + marker);
  Result r = launch("-- " + w + " " + yaml.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "cumulus-run: error: " + yaml.string() +
                          ":3:3: launch.nproc_per_nod: unknown key; did you mean "
                          "`launch.nproc_per_node`?\n");
  EXPECT_FALSE(fs::exists(marker));
}

}  // namespace

namespace {

TEST_F(LauncherTest, WorkersGetAGraceInsideTheLaunchersOwn) {
  std::string w = script("grace.sh", "echo grace=$CUMULUS_PREEMPTION_GRACE");
  Result r = launch("--preemption-grace 10 -- " + w);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0] grace=8.000000"), std::string::npos) << r.output;
  r = launch("--preemption-grace 0.5 -- " + w);
  EXPECT_NE(r.output.find("[rank0] grace=0.400000"), std::string::npos) << r.output;
}

}  // namespace

// Recovery in place (launch.recovery: in_place): the agent names each worker process, replaces a
// dead one without touching the others, and tells the workers' quorum in the Store.
namespace {

class InPlaceTest : public LauncherTest {
 protected:
  // cumulus-run on a Store the test can read (port_, token "tok"), in the background.
  pid_t startAgent(const std::string& flags, const std::string& worker) {
    port_ = freePort();
    const std::string cmd = "CUMULUS_JOB_TOKEN=tok " + kRun + " --log-dir " +
                            (dir_ / "logs").string() +
                            " --rdzv-endpoint 127.0.0.1:" + std::to_string(port_) + " " + flags +
                            " -- " + worker + " >" + (dir_ / "out").string() + " 2>&1";
    const std::string line = "exec env " + cmd;  // no allocation between fork() and exec
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  }
  std::string out() { return readFile(dir_ / "out"); }
  std::string path(const std::string& name) { return (dir_ / name).string(); }
  // What cumulus-train does first in place: close epoch 0 of the workers' quorum in the Store, so
  // the agent treats failures in place (a program that never does is restarted instead). Then
  // the file `in-place` tells the script workers to go on.
  void declareInPlace(const std::string& members) {
    cumulus::comm::StoreClientOptions options;
    options.connect_timeout = std::chrono::seconds(20);
    cumulus::comm::StoreClient store("127.0.0.1", port_, "tok", options);
    store.set(
        cumulus::comm::quorumRecordKey(0, 0),
        "{\"members\":" + members + ",\"step\":-1,\"source\":-1,\"stale\":[],\"admitted\":0}");
    std::ofstream(dir_ / "in-place") << "";
  }
  // A shell line that waits for declareInPlace().
  std::string waitInPlace() {
    return "while [ ! -f " + path("in-place") + " ]; do sleep 0.02; done; ";
  }
  int port_ = 0;
};

TEST_F(InPlaceTest, WorkersGetMemberIdsAndTheBoundsButNoJoinFlag) {
  const std::string w =
      script("env.sh",
             "echo rank=$RANK member=$CUMULUS_MEMBER_ID recovery=$CUMULUS_RECOVERY "
             "min=$CUMULUS_MIN_WORKERS max=$CUMULUS_MAX_WORKERS join=${CUMULUS_JOIN-none}");
  Result r = launch("--nproc-per-node 2 --recovery in_place --run-id ipenv -- " + w);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0] rank=0 member=0.0.0 recovery=in_place min=2 max=2 join=none\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank1] rank=1 member=0.1.0 recovery=in_place min=2 max=2 join=none\n"),
            std::string::npos)
      << r.output;
  // Recovery by restart (the default here) hands out none of these.
  r = launch("--nproc-per-node 1 --recovery restart -- " + w);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0] rank=0 member= recovery= min= max= join=none\n"),
            std::string::npos)
      << r.output;
}

// --min-workers 1 on one node: a worker that stops at a notice of its own (exit 75, as a trainer
// that left the group in place) is neither a failure nor the job's preemption; the other trains
// to the end, and the launcher says which rank left.
TEST_F(InPlaceTest, AWorkerThatLeavesAtItsOwnNoticeLetsTheOthersFinish) {
  const std::string left = path("left");
  const std::string w = script("w.sh",
                               "echo min=$CUMULUS_MIN_WORKERS\n"
                               "if [ \"$RANK\" = 1 ]; then touch " +
                                   left +
                                   "; exit 75; fi\n"
                                   "while [ ! -f " +
                                   left + " ]; do sleep 0.02; done\n");
  const Result r =
      launch("--nproc-per-node 2 --min-workers 1 --recovery in_place --run-id leave -- " + w);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0] min=1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: rank(s) 1 stopped at a preemption notice (exit 75) and the "
                          "other 1 worker(s) finished training\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("finished before they could be preempted"), std::string::npos)
      << r.output;
}

TEST_F(InPlaceTest, ADeadWorkerIsMarkedGoneAndReplacedWhileTheOtherKeepsRunning) {
  // Rank 1's first process kills itself; its replacement says what it got. Rank 0 records any
  // signal it receives and runs until the test releases both.
  const std::string w = script("w.sh",
                               "if [ -n \"$CUMULUS_JOIN\" ]; then\n"
                               "  echo joined rank=$RANK of $WORLD_SIZE member=$CUMULUS_MEMBER_ID "
                               "join=$CUMULUS_JOIN restarts=$CUMULUS_RESTART_COUNT\n"
                               "elif [ \"$LOCAL_RANK\" = 1 ]; then " +
                                   waitInPlace() +
                                   "kill -9 $$\n"
                                   "else trap 'echo $$ >> " +
                                   path("signalled") +
                                   "' TERM INT HUP\n"
                                   "fi\n"
                                   "while [ ! -f " +
                                   path("release") +
                                   " ]; do sleep 0.02; done\n"
                                   "echo done member=$CUMULUS_MEMBER_ID");
  const pid_t agent = startAgent("--nproc-per-node 2 --recovery in_place --run-id ip", w);
  declareInPlace(R"(["0.0.0","0.1.0"])");
  cumulus::comm::StoreClient store("127.0.0.1", port_, "tok");
  // The agent marks the dead worker gone (a blocking read: the event itself), then replaces it.
  EXPECT_EQ(store.get(cumulus::comm::quorumGoneKey(0, "0.1.0"), std::chrono::seconds(30)),
            "signal SIGKILL");
  EXPECT_EQ(store.tryGet(cumulus::comm::quorumGoneKey(0, "0.0.0")), std::nullopt);
  EXPECT_EQ(store.tryGet(cumulus::comm::quorumGoneKey(0, "0.1.1")), std::nullopt);
  std::ofstream(dir_ / "release") << "";
  EXPECT_EQ(waitExitCode(agent), 0) << out();
  const std::string text = out();
  EXPECT_NE(text.find("cumulus-run: rank 1 (member 0.1.0) died (signal SIGKILL); the group goes "
                      "on without it; starting a replacement (member 0.1.1), restart 1 of 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[rank1] joined rank=1 of 2 member=0.1.1 join=1 restarts=1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[rank0] done member=0.0.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank1] done member=0.1.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cumulus-run: all 2 worker(s) finished\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("stopping the group"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir_ / "signalled")) << readFile(dir_ / "signalled");
  // The failure is on record, and the replacement's log does not overwrite the dead one's.
  const std::string errors = readFile(dir_ / "logs/ip/errors.jsonl");
  EXPECT_TRUE(std::regex_match(
      errors, std::regex(R"(\{"time":"[0-9TZ:-]+","run_id":"ip","generation":0,"rank":1,)"
                         R"("local_rank":1,"node_rank":0,"pid":\d+,"signal":"SIGKILL",)"
                         R"("log":".*/gen0/rank1.log"\}\n)")))
      << errors;
  EXPECT_EQ(readFile(dir_ / "logs/ip/gen0/rank1.1.log"),
            "joined rank=1 of 2 member=0.1.1 join=1 restarts=1\ndone member=0.1.1\n");
  EXPECT_TRUE(fs::exists(dir_ / "logs/ip/gen0/rank1.log"));
}

TEST_F(InPlaceTest, GivesUpWhenNoRestartsAreLeft) {
  const std::string w =
      script("bad.sh", "if [ \"$RANK\" = 1 ]; then " + waitInPlace() + "exit 7; fi\nexec sleep 30");
  const auto start = std::chrono::steady_clock::now();
  const pid_t agent = startAgent(
      "--nproc-per-node 2 --recovery in_place --run-id ipbad --max-restarts 1 --stop-grace 5", w);
  declareInPlace(R"(["0.0.0","0.1.0"])");
  EXPECT_EQ(waitExitCode(agent), 1) << out();
  const std::string text = out();
  EXPECT_NE(text.find("cumulus-run: rank 1 (member 0.1.0) died (exit code 7); the group goes "
                      "on without it; starting a replacement (member 0.1.1), restart 1 of 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cumulus-run: giving up: rank 1 failed (exit code 7) and no restarts are "
                      "left (--max-restarts 1); see "),
            std::string::npos)
      << text;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 15.0);
  const std::string errors = readFile(dir_ / "logs/ipbad/errors.jsonl");
  EXPECT_EQ(std::count(errors.begin(), errors.end(), '\n'), 2) << errors;
}

// A permanent failure in place (exit code 2: the trainer's diverged loss, its model's exception)
// is not worth a replacement: the job ends at once, the other worker killed, and the last line
// repeats the worker's own error.
TEST_F(InPlaceTest, APermanentFailureEndsTheJobAtOnce) {
  const std::string w =
      script("w.sh", "if [ \"$RANK\" = 1 ]; then " + waitInPlace() +
                         "echo 'worker: error: the loss diverged'; exit 2; fi\n"
                         "trap '' TERM\nexec sleep 30");  // only a SIGKILL stops rank 0 at once
  const pid_t agent = startAgent(
      "--nproc-per-node 2 --recovery in_place --run-id ipperm --max-restarts 3 --stop-grace 20", w);
  declareInPlace(R"(["0.0.0","0.1.0"])");
  const auto failed = std::chrono::steady_clock::now();
  EXPECT_EQ(waitExitCode(agent), 2) << out();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - failed).count(), 5.0);
  const std::string text = out();
  EXPECT_EQ(text.find("replacement"), std::string::npos) << text;
  EXPECT_EQ(text.find("goes on"), std::string::npos) << text;
  EXPECT_TRUE(endsWith(text,
                       "cumulus-run: giving up: rank 1 failed (exit code 2), an error that a "
                       "restart would repeat, so none was tried: worker: error: the loss "
                       "diverged (see " +
                           path("logs/ipperm/gen0/rank1.log") + ")\n"))
      << text;
  const std::string errors = readFile(dir_ / "logs/ipperm/errors.jsonl");
  EXPECT_EQ(std::count(errors.begin(), errors.end(), '\n'), 1) << errors;
}

// In place, but the last worker of the group died: a replacement would have no one to join, so
// the group restarts (from the newest checkpoint) instead.
TEST_F(InPlaceTest, TheGroupRestartsWhenNoMemberIsLeft) {
  const std::string w = script("w.sh", "if [ \"$CUMULUS_GENERATION\" = 0 ]; then " + waitInPlace() +
                                           "exit 1; fi\necho done gen=$CUMULUS_GENERATION");
  const pid_t agent =
      startAgent("--nproc-per-node 1 --recovery in_place --run-id iplast --max-restarts 3", w);
  declareInPlace(R"(["0.0.0"])");
  EXPECT_EQ(waitExitCode(agent), 0) << out();
  const std::string text = out();
  EXPECT_EQ(text.find("goes on without it"), std::string::npos) << text;
  EXPECT_NE(text.find("cumulus-run: rank 0 failed (exit code 1), and no member of the group "
                      "holds the training state any more; stopping the group to restart it\n"
                      "cumulus-run: restarting the group (restart 1 of 3)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[rank0] done gen=1\n"), std::string::npos) << text;
}

TEST_F(InPlaceTest, TheExperimentChoosesItAndABadValueIsExitTwo) {
  fs::path yaml = dir_ / "exp.yaml";
  std::ofstream(yaml) << "name: exp\nlaunch:\n  nproc_per_node: 1\n  recovery: bogus\n";
  const std::string w = script("w.sh", "echo recovery=${CUMULUS_RECOVERY-unset}");
  Result r = launch("-- " + w + " " + yaml.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "cumulus-run: error: " + yaml.string() +
                          ":4:13: launch.recovery: expected one of in_place, restart, got "
                          "\"bogus\"\n");
  r = launch("--recovery bogus -- " + w);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "cumulus-run: error: --recovery: must be in_place or restart, got 'bogus'\n");

  std::ofstream(yaml) << "name: exp\nlaunch:\n  nproc_per_node: 1\n  recovery: in_place\n";
  r = launch("-- " + w + " " + yaml.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0] recovery=in_place\n"), std::string::npos) << r.output;
  // The funnel's parameter server serves one world size: such a job recovers by restarting.
  r = launch("-- " + w + " " + yaml.string() + " --set comm.algorithm=funnel");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: launch.recovery in_place is not possible with "
                          "comm.algorithm funnel (its parameter server serves one world size); a "
                          "failure restarts the group instead\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank0] recovery=unset\n"), std::string::npos) << r.output;
}

}  // namespace
