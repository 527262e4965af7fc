// Multi-host jobs on a simulated cluster (launch/netns-cluster.sh): one cumulus-run per network
// namespace, each binding its own address. Needs root and `ip netns`; skips with the reason
// otherwise. Each test builds its own cluster under an id derived from the pid (so test processes
// run side by side) and removes it in TearDown, whatever happened.

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace {

const std::string kScript = std::string(CUMULUS_SOURCE_DIR) + "/launch/netns-cluster.sh";
using cumulus::testing::kProbe;
using cumulus::testing::kRun;
using cumulus::testing::readFile;

const std::string kLinkDelay = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-link-delay";

// Runs `command` under bash; returns its exit code and puts stdout+stderr into `output`.
int shell(const std::string& command, std::string* output = nullptr) {
  const fs::path out = fs::temp_directory_path() / ("cumulus-mh-sh-" + std::to_string(::getpid()));
  const std::string full = "bash -c '" + command + "' > " + out.string() + " 2>&1";
  const int status = std::system(full.c_str());
  if (output) *output = readFile(out);
  fs::remove(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class Multihost : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (netns-cluster.sh)";
    dir_ = fs::temp_directory_path() /
           ("cumulus-mh-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (up_) shell(kScript + " --id " + std::to_string(id_) + " down");
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Brings up `hosts` hosts; skips the test when namespaces are not available here.
  void up(int hosts, const std::string& flags = "--rate 1gbit") {
    std::string out;
    for (int attempt = 0; attempt < 5; ++attempt) {
      id_ = 50 + (::getpid() + attempt * 37) % 150;
      // --delay without netem: this build's delay line, whichever build directory this is.
      const int rc = shell("CUMULUS_LINK_DELAY=" + kLinkDelay + " " + kScript + " --id " +
                               std::to_string(id_) + " up " + std::to_string(hosts) + " " + flags,
                           &out);
      if (rc == 0) {
        up_ = true;
        up_output_ = out;
        return;
      }
      if (rc == 3) GTEST_SKIP() << "network namespaces are not available: " << out;
      // Another test process holds this id: try the next.
    }
    FAIL() << "netns-cluster.sh up failed: " << out;
  }
  std::string ns() const { return kScript + " --id " + std::to_string(id_); }
  std::string addr(int host) const {
    return "10.231." + std::to_string(id_) + "." + std::to_string(host + 1);
  }

  // Starts one cumulus-run per host in the background, logs to dir_/nI.log, exit codes to
  // dir_/rcI; returns the script text (the caller appends the waiting part).
  std::string startJob(int hosts, const std::string& probe_args, const std::string& run_flags) {
    std::string s = "export CUMULUS_JOB_TOKEN=mh-test-token; ";
    for (int i = 0; i < hosts; ++i) {
      s += "(" + ns() + " run " + std::to_string(i) + " timeout 60 " + kRun + " --nnodes " +
           std::to_string(hosts) + " --node-rank " + std::to_string(i) + " --rdzv-endpoint " +
           addr(0) + ":29500 --rdzv-timeout 20 --max-restarts 0 --stop-grace 2 --log-dir " +
           (dir_ / "logs").string() + " --run-id mh " + run_flags + " -- " + kProbe + " " +
           probe_args + " > " + (dir_ / ("n" + std::to_string(i) + ".log")).string() +
           " 2>&1; echo $? > " + (dir_ / ("rc" + std::to_string(i))).string() + ") & ";
    }
    return s;
  }
  // Script text: wait until rank 0 is inside the collectives (past its first timed point), pull
  // host 2's plug, then wait for the rest.
  // Shell that returns once rank 0 has joined the group (the probe's first line, printed after the
  // rendezvous) and a second of collectives has run.
  std::string waitForCollectives() const {
    return "for i in $(seq 600); do grep -q \"probe: 3 rank(s), data plane\" " +
           (dir_ / "n0.log").string() + " && break; sleep 0.1; done; sleep 1; ";
  }
  std::string killHost2OnceTiming() const { return waitForCollectives() + ns() + " kill 2; wait"; }
  int rc(int host) const {
    const std::string text = readFile(dir_ / ("rc" + std::to_string(host)));
    return text.empty() ? -1 : std::stoi(text);
  }
  std::string log(int host) const { return readFile(dir_ / ("n" + std::to_string(host) + ".log")); }

  fs::path dir_;
  int id_ = 0;
  bool up_ = false;
  std::string up_output_;
};

TEST_F(Multihost, ClusterUpShapesEachLinkAndDownRemovesIt) {
  up(3, "--rate 1gbit --delay 0.1ms");
  if (HasFatalFailure() || IsSkipped()) return;
  std::string out;
  ASSERT_EQ(shell(ns() + " status", &out), 0) << out;
  const std::string status = out;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(out.find("host " + std::to_string(i) + "  ns cmh" + std::to_string(id_) + "n" +
                       std::to_string(i) + "  addr " + addr(i) + "  qdisc qdisc tbf 1: root"),
              std::string::npos)
        << out;
  }
  EXPECT_NE(out.find("rate 1Gbit"), std::string::npos) << out;
  // The switch side of each link is shaped too (host ingress).
  ASSERT_EQ(shell("ip netns exec cmh" + std::to_string(id_) + "sw tc qdisc show dev cmp2", &out),
            0);
  EXPECT_NE(out.find("tbf 1: root"), std::string::npos) << out;
  EXPECT_NE(out.find("rate 1Gbit"), std::string::npos) << out;
  // --delay: netem where the kernel has it, otherwise the delay line in user space.
  std::string qdiscs;
  shell(ns() + " run 1 tc qdisc show dev eth0", &qdiscs);
  if (qdiscs.find("netem") == std::string::npos) {
    EXPECT_NE(up_output_.find("no netem qdisc in this kernel: the delay line "), std::string::npos)
        << up_output_;
    EXPECT_NE(up_output_.find("cumulus-link-delay holds each host's packets 0.1ms"),
              std::string::npos)
        << up_output_;
    EXPECT_NE(status.find("lat 20ms   delay line cmdly\nhost 1 "), std::string::npos) << status;
  }
  ASSERT_EQ(shell(ns() + " addr 2", &out), 0);
  EXPECT_EQ(out, addr(2) + "\n");
  EXPECT_EQ(shell(ns() + " run 1 ip -4 -o addr show dev eth0", &out), 0);
  EXPECT_NE(out.find(addr(1) + "/24"), std::string::npos) << out;
  EXPECT_NE(shell(ns() + " run 3 true", &out), 0);
  EXPECT_NE(out.find("has no host 3"), std::string::npos) << out;

  ASSERT_EQ(shell(ns() + " down", &out), 0) << out;
  up_ = false;
  shell("ip netns list", &out);
  EXPECT_EQ(out.find("cmh" + std::to_string(id_)), std::string::npos) << out;
  ASSERT_EQ(shell(ns() + " status", &out), 0);
  EXPECT_EQ(out, "cluster " + std::to_string(id_) + ": down\n");
}

// --delay 20ms holds each packet 20 ms on its way (netem, or the delay line where the kernel has no
// netem): a 4 KiB ring all-reduce of two hosts is two one-way trips, so no call is under 40 ms.
TEST_F(Multihost, DelayHoldsEveryPacketOnItsWay) {
  up(2, "--rate 1gbit --delay 20ms");
  if (HasFatalFailure() || IsSkipped()) return;
  if (up_output_.find("--delay 20ms ignored") != std::string::npos) {
    GTEST_SKIP() << "no way to delay packets here: " << up_output_;
  }
  const fs::path tsv = dir_ / "points.tsv";
  std::string out;
  shell(startJob(2,
                 "--algorithms ring --sizes 4096 --target-seconds 0.01 --max-iters 3 --out " +
                     tsv.string(),
                 "") +
            "wait",
        &out);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(rc(i), 0) << "host " << i << ":\n" << log(i);
  // algorithm world bytes iters median_s min_s ...
  std::istringstream row(readFile(tsv));
  std::string algorithm;
  int world = 0;
  int64_t bytes = 0, iters = 0;
  double median_s = 0, min_s = 0;
  ASSERT_TRUE(row >> algorithm >> world >> bytes >> iters >> median_s >> min_s) << readFile(tsv);
  EXPECT_EQ(algorithm, "ring");
  EXPECT_EQ(world, 2);
  EXPECT_GE(min_s, 0.040) << readFile(tsv);
  EXPECT_LT(median_s, 1.0) << readFile(tsv);
}

// Three agents in three namespaces: node 0 hosts the Store and the parameter server on its own
// address, every worker's data plane binds its host's address, and funnel, tree and ring all give
// the exact sum (the probe checks p(p+1)/2 and exits 1 otherwise).
TEST_F(Multihost, ThreeHostJobBindsEachHostsAddressAndSumsExactly) {
  up(3);
  if (HasFatalFailure() || IsSkipped()) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  shell(startJob(3,
                 "--algorithms funnel,tree,ring,auto --sizes 4096,1048576 --target-seconds 0.01"
                 " --max-iters 2",
                 "--parameter-server") +
            "wait",
        &out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rc(i), 0) << "host " << i << ":\n" << log(i);
    EXPECT_NE(log(i).find("data plane on " + addr(i)), std::string::npos) << log(i);
  }
  EXPECT_NE(log(0).find("store " + addr(0) + ":29500"), std::string::npos) << log(0);
  EXPECT_NE(log(0).find("parameter server (funnel) on " + addr(0) + ":"), std::string::npos);
  for (const char* algorithm : {"funnel", "tree", "ring", "auto  "}) {
    EXPECT_NE(log(0).find(std::string("probe: ") + algorithm), std::string::npos) << log(0);
  }
  EXPECT_NE(log(0).find("probe: 3 rank(s), data plane on " + addr(0)), std::string::npos);
  EXPECT_LT(seconds, 30.0);
}

// Node loss: every process of host 2 is killed mid-collective. A survivor's worker raises a
// typed communication error naming the lost peer, and their agents give up (no restarts left)
// well within the collective timeout.
TEST_F(Multihost, NodeLossFailsSurvivorsWithTypedErrorNamingThePeer) {
  up(3);
  if (HasFatalFailure() || IsSkipped()) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::string script =
      startJob(3, "--algorithms ring --sizes 16777216 --target-seconds 100 --max-iters 200", "");
  script += killHost2OnceTiming();
  std::string out;
  shell(script, &out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rc(i), 1) << "host " << i << ":\n" << log(i);
    EXPECT_NE(log(i).find("giving up"), std::string::npos) << log(i);
  }
  // The first survivor to notice fails with the communicator's typed error (op, sequence number,
  // peer) naming the lost rank 2. The other survivor's worker may fail the same way, or be stopped
  // by its agent first when the group's failure reaches the agent before the worker notices.
  const fs::path gen0 = dir_ / "logs" / "mh" / "gen0";
  const std::string survivors = readFile(gen0 / "rank0.log") + readFile(gen0 / "rank1.log");
  const std::regex typed(
      "cumulus-allreduce-probe: error: (allreduce|barrier) seq [0-9]+ with rank [0-9]");
  const auto typed_errors = std::distance(
      std::sregex_iterator(survivors.begin(), survivors.end(), typed), std::sregex_iterator());
  EXPECT_GE(typed_errors, 1) << survivors;
  EXPECT_LE(typed_errors, 2) << survivors;
  EXPECT_NE(survivors.find("with rank 2: peer closed"), std::string::npos) << survivors;
  EXPECT_LT(seconds, 20.0);
}

// A host's cable pulled mid-collective: nothing closes, nothing arrives. The survivors' workers
// hit the collective deadline (--timeout 3) with a typed timeout error, and the agents give up.
TEST_F(Multihost, LinkDownMidCollectiveTimesOutOnSurvivors) {
  up(3);
  if (HasFatalFailure() || IsSkipped()) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::string script = startJob(
      3, "--algorithms ring --sizes 16777216 --target-seconds 100 --max-iters 200 --timeout 3", "");
  script += waitForCollectives() + ns() + " link 2 down; wait";
  std::string out;
  shell(script, &out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rc(i), 1) << "host " << i << ":\n" << log(i);
  }
  const fs::path gen0 = dir_ / "logs" / "mh" / "gen0";
  const std::string survivors = readFile(gen0 / "rank0.log") + readFile(gen0 / "rank1.log");
  EXPECT_NE(survivors.find("timeout"), std::string::npos) << survivors;
  EXPECT_NE(survivors.find("with rank"), std::string::npos) << survivors;
  EXPECT_LT(seconds, 40.0);
}

// Elastic --nnodes 2:3 across namespaces: host 2 is lost mid-collective (every process in its
// namespace SIGKILLed); the survivors' agents restart without it, node 0 closes the next
// rendezvous round with two nodes after the last call, and the job completes at world size 2.
TEST_F(Multihost, ElasticJobGoesOnWithoutALostHost) {
  up(3);
  if (HasFatalFailure() || IsSkipped()) return;
  const std::string worker = (dir_ / "probe.sh").string();
  std::ofstream(worker) << "#!/bin/sh\nif [ \"$CUMULUS_GENERATION\" = 0 ]; then\n  exec " << kProbe
                        << " --algorithms ring --sizes 16777216 --target-seconds 100"
                           " --max-iters 200\nfi\nexec "
                        << kProbe << " --algorithms ring --sizes 4096 --max-iters 2\n";
  fs::permissions(worker, fs::perms::owner_all);
  const auto t0 = std::chrono::steady_clock::now();
  std::string script = "export CUMULUS_JOB_TOKEN=mh-test-token; ";
  for (int i = 0; i < 3; ++i) {
    script += "(" + ns() + " run " + std::to_string(i) + " timeout 60 " + kRun +
              " --nnodes 2:3 --node-rank " + std::to_string(i) + " --rdzv-endpoint " + addr(0) +
              ":29500 --rdzv-timeout 20 --rdzv-last-call 1 --max-restarts 1 --stop-grace 2" +
              " --log-dir " + (dir_ / "logs").string() + " --run-id mh -- " + worker + " > " +
              (dir_ / ("n" + std::to_string(i) + ".log")).string() + " 2>&1; echo $? > " +
              (dir_ / ("rc" + std::to_string(i))).string() + ") & ";
  }
  script += killHost2OnceTiming();
  std::string out;
  shell(script, &out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rc(i), 0) << "host " << i << ":\n" << log(i);
    EXPECT_NE(log(i).find("generation 0: nodes 0,1,2, world size 3"), std::string::npos) << log(i);
    EXPECT_NE(log(i).find("cumulus-run: restarting the group (restart 1 of 1)"), std::string::npos)
        << log(i);
    EXPECT_NE(log(i).find("generation 1: nodes 0,1, world size 2; this node is node rank " +
                          std::to_string(i)),
              std::string::npos)
        << log(i);
    EXPECT_NE(log(i).find("data plane on " + addr(i)), std::string::npos) << log(i);
  }
  EXPECT_NE(log(0).find("probe: 2 rank(s)"), std::string::npos) << log(0);
  const fs::path gen0 = dir_ / "logs" / "mh" / "gen0";
  const std::string survivors = readFile(gen0 / "rank0.log") + readFile(gen0 / "rank1.log");
  EXPECT_NE(survivors.find("with rank 2: peer closed"), std::string::npos) << survivors;
  EXPECT_LT(seconds, 30.0);
}

}  // namespace
