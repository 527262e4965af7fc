// cumulus-run polling each cloud's metadata service, as users run it: a strict fake service per
// cloud (tests/launch/fake_metadata.py, its own process on a free loopback port) and real
// cumulus-train workers, or small shell workers where only the launcher's side is under test.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/test_support.h"
#include "tests/wait_until.h"

namespace fs = std::filesystem;

namespace {

using cumulus::testing::waitUntil;

using cumulus::testing::kRun;
using cumulus::testing::kSmoke;
using cumulus::testing::kTrain;
using cumulus::testing::readFile;

const std::string kFake = std::string(CUMULUS_SOURCE_DIR) + "/tests/launch/fake_metadata.py";

const std::string kAwsPath = "/latest/meta-data/spot/instance-action";
const std::string kAzurePath = "/metadata/scheduledevents?api-version=2020-07-01";
const std::string kGcpPath = "/computeMetadata/v1/instance/preempted";

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// fake_metadata.py with `args`, started and stopped with the test. It prints its port first.
class FakeCloud {
 public:
  explicit FakeCloud(const std::string& args) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    const std::string cmd = "exec python3 " + kFake + " " + args;  // built before fork()
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ::close(fds[1]);
    FILE* out = ::fdopen(fds[0], "r");
    char line[32] = {0};
    if (std::fgets(line, sizeof line, out) != nullptr) port_ = std::atoi(line);
    std::fclose(out);
  }
  ~FakeCloud() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }
  std::string spec(const std::string& path) const {
    return "url:http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

struct Result {
  int exit_code = -1;
  std::string output;
};

class CloudNoticeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cumulus-notice-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    trigger_ = (dir_ / "notice-now").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // cumulus-run with `args`, its output to a file; returns once it has exited.
  Result launch(const std::string& args) {
    const fs::path out = dir_ / "launcher.out";
    const std::string cmd = kRun + " --log-dir " + (dir_ / "logs").string() + " " + args + " >" +
                            out.string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, readFile(out)};
  }

  // Two cumulus-train workers on the smoke config with checkpoints every 20 steps, long enough
  // that only the notice ends them; the notice is up once the first checkpoint is in.
  // `ready`, when given, must also hold before the notice goes up.
  Result trainUntilNotice(const std::string& notice_spec, const std::function<bool()>& ready = {}) {
    const std::string train = kTrain + " " + kSmoke + " --set trainer.run_dir=" + run().string() +
                              " --set trainer.epochs=400 --set checkpoint.every_steps=20";
    Result r;
    std::thread launcher([&] {
      r = launch("--nproc-per-node 2 --preemption-notice " + notice_spec + " -- " + train);
    });
    // Some checkpoint is there (retention may already have removed step 20's).
    auto checkpointed = [&] {
      std::error_code error;
      for (const auto& e : fs::directory_iterator(checkpoints(), error)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos) return true;
      }
      return false;
    };
    const bool training =
        waitUntil([&] { return checkpointed() && (!ready || ready()); }, std::chrono::seconds(120));
    std::ofstream(trigger_) << "";
    launcher.join();
    EXPECT_TRUE(training) << r.output;
    return r;
  }

  // The launcher reported "preempted at step S, checkpoint PATH" and PATH is a checkpoint of a
  // step after the notice went up.
  void expectCheckpointedAndStopped(const Result& r) {
    EXPECT_EQ(r.exit_code, 75) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        r.output, m, std::regex(R"(cumulus-run: preempted at step (\d+), checkpoint (\S+))")))
        << r.output;
    EXPECT_GE(std::stoi(m[1]), 20);
    EXPECT_TRUE(fs::exists(fs::path(m[2].str()) / "MANIFEST")) << m[2];
    EXPECT_EQ(count(r.output, "warning: preemption notice source"), 0u) << r.output;
  }

  fs::path run() const { return dir_ / "run"; }
  fs::path checkpoints() const { return run() / "checkpoints"; }

  fs::path dir_;
  std::string trigger_;
};

TEST_F(CloudNoticeTest, AwsImdsV2NoticeWithExpiringTokensCheckpointsAndExits75) {
  const std::string log = (dir_ / "requests.log").string();
  // Tokens die after 1 s whatever TTL was asked for: the launcher must fetch new ones.
  FakeCloud aws("--cloud aws --token-lifetime 1 --notice-when " + trigger_ + " --log " + log);
  // The notice goes up once the launcher has had to fetch a second token (the first one expired).
  const Result r = trainUntilNotice(
      aws.spec(kAwsPath), [&] { return count(readFile(log), "PUT /latest/api/token 200") >= 2; });
  expectCheckpointedAndStopped(r);
  EXPECT_NE(r.output.find("cumulus-run: preemption notice (AWS spot/instance-action terminate at "
                          "2026-11-23T22:30:00Z); asking the workers to checkpoint and stop"),
            std::string::npos)
      << r.output;
  const std::string requests = readFile(log);
  EXPECT_GE(count(requests, "PUT /latest/api/token 200"), 2u) << requests;
  EXPECT_GE(count(requests, "GET " + kAwsPath + " 200"), 1u) << requests;
}

TEST_F(CloudNoticeTest, AzurePreemptEventCheckpointsAndExits75) {
  // Until the notice, Scheduled Events holds a Freeze for another VM, which is no notice.
  FakeCloud azure("--cloud azure --notice-when " + trigger_);
  const Result r = trainUntilNotice(azure.spec(kAzurePath));
  expectCheckpointedAndStopped(r);
  EXPECT_NE(r.output.find("cumulus-run: preemption notice (Azure Scheduled Events Preempt C3D4 not "
                          "before Mon, 23 Nov 2026 22:30:30 GMT)"),
            std::string::npos)
      << r.output;
}

TEST_F(CloudNoticeTest, GcpPreemptedCheckpointsAndExits75) {
  FakeCloud gcp("--cloud gcp --notice-when " + trigger_);
  const Result r = trainUntilNotice(gcp.spec(kGcpPath));
  expectCheckpointedAndStopped(r);
  EXPECT_NE(r.output.find("cumulus-run: preemption notice (GCP instance/preempted = TRUE)"),
            std::string::npos)
      << r.output;
}

// The recommendation is up from the first poll, usually before the workers have installed their
// handler: the request waits in their blocked signal mask and is answered after their first step.
TEST_F(CloudNoticeTest, AwsRebalanceRecommendationCheckpointsAndTrainsToTheEnd) {
  FakeCloud aws("--cloud aws --rebalance");
  const std::string train = kTrain + " " + kSmoke + " --set trainer.run_dir=" + run().string() +
                            " --set trainer.epochs=4 --set checkpoint.every_steps=0";
  const Result r =
      launch("--nproc-per-node 2 --preemption-notice " + aws.spec(kAwsPath) + " -- " + train);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output,
                  "cumulus-run: AWS rebalance recommendation at 2026-11-23T22:25:00Z; "
                  "asking the workers to checkpoint now and keep training"),
            1u)
      << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(\[rank0\] checkpoint requested at step (\d+); training goes on)")))
      << r.output;
  const int step = std::stoi(m[1]);
  EXPECT_LT(step, 64);
  // Checkpoints are otherwise off, so the one checkpoint is the requested one.
  std::vector<std::string> saved;
  for (const auto& entry : fs::directory_iterator(checkpoints())) {
    saved.push_back(entry.path().filename().string());
  }
  char expected[32];
  std::snprintf(expected, sizeof expected, "step-%08d", step);
  EXPECT_EQ(saved, std::vector<std::string>{expected}) << r.output;
  EXPECT_TRUE(fs::exists(checkpoints() / expected / "MANIFEST"));
  EXPECT_NE(r.output.find("[rank0] trained 64 steps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: all 2 worker(s) finished"), std::string::npos) << r.output;
}

// An answer that is neither "no notice" nor a notice: one warning naming the source and the
// status, and polling goes on until the notice.
struct Misbehaviour {
  const char* cloud;
  const std::string* path;
  const char* kind;
  const char* request;  // as the warning names it
  const char* problem;
};

// Names the case in ctest's list instead of gtest's byte dump.
void PrintTo(const Misbehaviour& m, std::ostream* os) { *os << m.cloud << " " << m.kind; }

class UnexpectedAnswerTest : public CloudNoticeTest,
                             public ::testing::WithParamInterface<Misbehaviour> {};

TEST_P(UnexpectedAnswerTest, IsOneWarningNamingSourceAndStatusAndPollingGoesOn) {
  const Misbehaviour& m = GetParam();
  FakeCloud cloud(std::string("--cloud ") + m.cloud + " --misbehave " + m.kind +
                  " --times 3 --notice-when " + trigger_);
  const std::string ready = (dir_ / "ready").string();
  const std::string worker = (dir_ / "w.sh").string();
  std::ofstream(worker) << "#!/bin/sh\ntrap 'echo checkpointed; exit 75' TERM\ntouch " << ready
                        << "\nwhile true; do sleep 0.05; done\n";
  fs::permissions(worker, fs::perms::owner_all);
  Result r;
  std::thread launcher(
      [&] { r = launch("--preemption-notice " + cloud.spec(*m.path) + " -- " + worker); });
  EXPECT_TRUE(waitUntil([&] { return fs::exists(ready); }, std::chrono::seconds(30)));
  std::ofstream(trigger_) << "";
  launcher.join();
  EXPECT_EQ(r.exit_code, 75) << r.output;
  const std::string warning = "cumulus-run: warning: preemption notice source " +
                              cloud.spec(*m.path) + ": " + m.request + " " + m.problem +
                              "; this is not read as \"no notice\" (still polling)\n";
  EXPECT_EQ(count(r.output, "warning: preemption notice source"), 1u) << r.output;
  EXPECT_NE(r.output.find(warning), std::string::npos) << warning << "\n---\n" << r.output;
  EXPECT_NE(r.output.find("cumulus-run: preemption notice ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank0] checkpointed"), std::string::npos) << r.output;
}

const std::string kAwsGet = "GET " + kAwsPath;
INSTANTIATE_TEST_SUITE_P(
    Clouds, UnexpectedAnswerTest,
    ::testing::Values(
        Misbehaviour{"aws", &kAwsPath, "401", kAwsGet.c_str(), "answered 401 Unauthorized"},
        Misbehaviour{"aws", &kAwsPath, "403", kAwsGet.c_str(), "answered 403 Forbidden"},
        Misbehaviour{"aws", &kAwsPath, "503", kAwsGet.c_str(), "answered 503 Service Unavailable"},
        Misbehaviour{"aws", &kAwsPath, "garbage", kAwsGet.c_str(),
                     "answered 200 with a body that is not an instance-action JSON: "
                     "\"<html>captive portal</html>\""},
        Misbehaviour{"aws", &kAwsPath, "hang", kAwsGet.c_str(), "gave no answer within 1000 ms"},
        Misbehaviour{"azure", &kAzurePath, "500", "GET /metadata/scheduledevents",
                     "answered 500 Internal Server Error"},
        Misbehaviour{"azure", &kAzurePath, "garbage", "GET /metadata/scheduledevents",
                     "answered 200 with a body that is not a Scheduled Events JSON: "
                     "\"<html>captive portal</html>\""},
        Misbehaviour{"gcp", &kGcpPath, "503", "GET /computeMetadata/v1/instance/preempted",
                     "answered 503 Service Unavailable"},
        Misbehaviour{"gcp", &kGcpPath, "hang", "GET /computeMetadata/v1/instance/preempted",
                     "gave no answer within 1000 ms"}),
    [](const ::testing::TestParamInfo<Misbehaviour>& info) {
      return std::string(info.param.cloud) + "_" + info.param.kind;
    });

}  // namespace
