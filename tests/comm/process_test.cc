// Ranks as separate processes. The workers are this same test binary, re-executed with
// --gtest_filter=CommWorker.Main and CUMULUS_COMM_WORKER="<rank> <world> <store dir> <mode>":
// one binary keeps the build simple and the worker always matches the test. The processes meet
// in a FileStore (file_store.h) in a fresh temporary directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "comm/communicator.h"
#include "comm/error.h"
#include "file_store.h"

extern char** environ;

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr size_t kCount = (1 << 20) + 3;

CommunicatorOptions workerOptions(Transport transport) {
  CommunicatorOptions o;
  o.transport = transport;
  o.job_token = "process-test";
  o.generation = 3;
  o.timeout = 20s;
  return o;
}

float valueOf(int rank, size_t i) { return float(rank + 1) * float(i % 13); }

// One step of the schedule every rank follows: fill, all-reduce (ring and tree alternate);
// returns the index of the first wrong element, or -1.
long step(Communicator& comm, std::vector<float>& v, int iteration) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = valueOf(comm.rank(), i);
  Buffer b{v.data(), v.size(), DType::kFloat32};
  comm.allreduce(b, {ReduceOp::kSum, iteration % 2 ? Algorithm::kTree : Algorithm::kRing});
  const int p = comm.world();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != float(p * (p + 1) / 2) * float(i % 13)) return long(i);
  }
  return -1;
}

// The worker side. Modes: "check" runs 3 ring and 3 tree all-reduces and verifies them (exit 0,
// or 3 on a wrong value); "loop" runs all-reduces until killed.
TEST(CommWorker, Main) {
  const char* spec = std::getenv("CUMULUS_COMM_WORKER");
  if (spec == nullptr) GTEST_SKIP() << "only runs as a worker process of ProcessTest";
  int rank = 0, world = 0;
  std::string dir, mode, transport;
  std::istringstream(spec) >> rank >> world >> dir >> mode >> transport;
  testing::FileStore store(dir);
  Communicator comm(rank, world, store, workerOptions(*parseTransport(transport)));
  std::vector<float> v(kCount);
  for (int iteration = 0; mode == "loop" || iteration < 6; ++iteration) {
    const long bad = step(comm, v, iteration);
    if (bad >= 0) {
      std::fprintf(stderr, "rank %d iteration %d: index %ld got %g\n", rank, iteration, bad,
                   v[size_t(bad)]);
      std::exit(3);
    }
  }
  store.set("done/" + std::to_string(rank), "verified 6 all-reduces");
  std::exit(0);  // skip gtest's own reporting in the worker
}

class Worker {
 public:
  Worker(int rank, int world, const std::string& dir, const std::string& mode,
         Transport transport) {
    std::string env = "CUMULUS_COMM_WORKER=" + std::to_string(rank) + " " + std::to_string(world) +
                      " " + dir + " " + mode + " " + transportName(transport);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(env.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", filter = "--gtest_filter=CommWorker.Main";
    char* argv[] = {exe.data(), filter.data(), nullptr};
    posix_spawn_file_actions_t actions;  // quiet stdout (gtest's banner); keep stderr
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    EXPECT_EQ(posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Worker() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Exit status, or -signal.
  int join() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

// Runs on every transport: a SIGKILLed or stopped peer must be detected over each (over shared
// memory the socket is still the liveness channel).
class ProcessTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cumulus-comm-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_P(ProcessTest, ThreeProcessesAllreduceCorrectly) {
  std::vector<std::unique_ptr<Worker>> workers;
  for (int r = 0; r < 3; ++r)
    workers.push_back(std::make_unique<Worker>(r, 3, dir_, "check", GetParam()));
  testing::FileStore store(dir_);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(workers[r]->join(), 0) << "worker rank " << r;
    EXPECT_EQ(store.tryGet("done/" + std::to_string(r)).value_or("missing"),
              "verified 6 all-reduces");
  }
}

// Rank 0 runs here; rank 1 is a process that is SIGKILLed in the middle of a collective: it
// loops, so after two steps it is already inside the third, waiting for rank 0.
TEST_P(ProcessTest, KilledPeerIsPeerClosedWithinTimeout) {
  Worker worker(1, 2, dir_, "loop", GetParam());
  testing::FileStore store(dir_);
  Communicator comm(0, 2, store, workerOptions(GetParam()));
  std::vector<float> v(kCount);
  int iteration = 0;
  ASSERT_EQ(step(comm, v, iteration++), -1);  // the group works
  ASSERT_EQ(step(comm, v, iteration++), -1);
  ::kill(worker.pid(), SIGKILL);
  const auto start = Clock::now();
  try {
    ASSERT_EQ(step(comm, v, iteration), -1);
    FAIL() << "the all-reduce with a killed peer returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed) << e.what();
    EXPECT_EQ(e.op(), "allreduce");
    EXPECT_EQ(e.peer(), 1);
    EXPECT_GE(e.seq(), 2u);
  }
  EXPECT_LT(Clock::now() - start, 5s);  // the timeout is 20 s: detection is by the socket
  EXPECT_EQ(worker.join(), -SIGKILL);
}

// A stopped (not dead) peer: only the deadline can tell. kTimeout names it.
TEST_P(ProcessTest, StoppedPeerTimesOut) {
  Worker worker(1, 2, dir_, "loop", GetParam());
  testing::FileStore store(dir_);
  Communicator comm(0, 2, store, workerOptions(GetParam()));
  std::vector<float> v(kCount);
  ASSERT_EQ(step(comm, v, 0), -1);
  ::kill(worker.pid(), SIGSTOP);
  const auto start = Clock::now();
  try {
    // The worker may be stopped mid-way through its next all-reduce; ours has to wait on it.
    Buffer b{v.data(), v.size(), DType::kFloat32};
    for (;;) comm.allreduce(b, {ReduceOp::kSum, Algorithm::kTree, 400ms});
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
    EXPECT_EQ(e.peer(), 1);
  }
  EXPECT_LT(Clock::now() - start, 2s);
  ::kill(worker.pid(), SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Transport, ProcessTest,
                         ::testing::Values(Transport::kTcp, Transport::kUnix, Transport::kShm),
                         [](const auto& info) { return std::string(transportName(info.param)); });

}  // namespace
}  // namespace cumulus::comm
