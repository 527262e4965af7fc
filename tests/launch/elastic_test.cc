// Elastic --nnodes MIN:MAX with real processes on loopback: one cumulus-run per "node", each in
// its own process group and log directory, sharing one job token and one run directory. A node
// loss is every process of one node (its launcher and its workers) SIGKILLed at once.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/store_client.h"
#include "launch/rendezvous_round.h"
#include "proto/checkpoint.pb.h"
#include "tests/launch/free_port.h"
#include "tests/test_support.h"
#include "tests/wait_until.h"

namespace fs = std::filesystem;

namespace {

using cumulus::testing::kProbe;
using cumulus::testing::kRun;
using cumulus::testing::kSmoke;
using cumulus::testing::kTrain;
using cumulus::testing::readFile;

// The pids whose parent is `parent`.
std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = readFile(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    int ppid = 0;
    if (close != std::string::npos && std::sscanf(stat.c_str() + close + 2, "%*c %d", &ppid) == 1 &&
        ppid == parent) {
      out.push_back(static_cast<pid_t>(std::stoi(name)));
    }
  }
  return out;
}

using cumulus::testing::freePort;
using cumulus::testing::waitUntil;

class ElasticTest : public ::testing::Test {
 protected:
  struct Node {
    pid_t pid = -1;
    int exit_code = -1;
  };

  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cumulus-elastic-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    port_ = freePort();
  }
  void TearDown() override {
    for (auto& [rank, node] : nodes_) {
      if (node.pid > 0) killNode(rank);
    }
    fs::remove_all(dir_);
  }

  std::string flags(const std::string& nnodes, const std::string& extra = "") const {
    return "--nnodes " + nnodes +
           " --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:" + std::to_string(port_) +
           " --run-id el --stop-grace 2 " + extra;
  }

  // Starts `cumulus-run FLAGS --node-rank RANK -- WORKER` in its own process group, output to
  // out(rank), logs under dir_/logsRANK. Node 0 first: the others wait for its Store.
  void start(int rank, const std::string& flags, const std::string& worker) {
    const std::string r = std::to_string(rank);
    const std::string cmd = "exec env CUMULUS_JOB_TOKEN=elastic-test " + kRun + " --log-dir " +
                            (dir_ / ("logs" + r)).string() + " " + flags + " --node-rank " + r +
                            " -- " + worker + " >" + out(rank).string() + " 2>&1";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ::setpgid(pid, pid);
    nodes_[rank].pid = pid;
  }

  // Waits for node `rank` to exit (at most `seconds`, then SIGKILLs it); returns its exit code.
  int finish(int rank, double seconds = 40) {
    Node& node = nodes_[rank];
    int status = 0;
    const bool exited = waitUntil([&] { return ::waitpid(node.pid, &status, WNOHANG) == node.pid; },
                                  std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
    if (!exited) {
      killNode(rank);
      return -1;
    }
    node.pid = -1;
    node.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return node.exit_code;
  }

  // Host loss: SIGKILL to the launcher's process group and to each worker keeper's (each leads its
  // own; its worker dies with it).
  // The launcher first: between two kill() calls a loaded machine may run it long enough to see
  // its workers die and join the next round as if it had survived.
  void killNode(int rank) {
    Node& node = nodes_[rank];
    if (node.pid <= 0) return;
    const std::vector<pid_t> workers = childrenOf(node.pid);
    ::kill(-node.pid, SIGKILL);
    for (pid_t worker : workers) ::kill(-worker, SIGKILL);
    ::waitpid(node.pid, nullptr, 0);
    node.pid = -1;
  }

  fs::path out(int rank) const { return dir_ / ("node" + std::to_string(rank) + ".out"); }
  std::string output(int rank) const { return readFile(out(rank)); }
  bool printed(int rank, const std::string& text) const {
    return output(rank).find(text) != std::string::npos;
  }

  fs::path dir_;
  int port_ = 0;
  std::map<int, Node> nodes_;
};

// The newest checkpoint's state.pb.
cumulus::proto::CheckpointState newestCheckpoint(const fs::path& dir) {
  std::string newest;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename();
    if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos && name > newest) {
      newest = name;
    }
  }
  cumulus::proto::CheckpointState state;
  EXPECT_TRUE(state.ParseFromString(readFile(dir / newest / "state.pb"))) << dir / newest;
  return state;
}

TEST_F(ElasticTest, LosingANodeRestartsTheSurvivorsFromTheCheckpointAtTheSmallerWorldSize) {
  const fs::path run = dir_ / "run";
  const std::string train = kTrain + " " + kSmoke + " --set trainer.run_dir=" + run.string() +
                            " --set trainer.epochs=40 --set checkpoint.every_steps=20" +
                            " --set trainer.log_every_steps=1000" +
                            " --set trainer.log_all_ranks=true";  // each node's lines, below
  const auto t0 = std::chrono::steady_clock::now();
  const std::string f =
      flags("2:3", "--recovery restart --rdzv-last-call 1 --rdzv-timeout 20 --max-restarts 2");
  for (int rank = 0; rank < 3; ++rank) start(rank, f, train);
  // Training is under way once the first checkpoint is in: then node 2 is lost.
  ASSERT_TRUE(waitUntil([&] { return fs::exists(run / "checkpoints" / "step-00000020"); },
                        std::chrono::seconds(30)))
      << output(0);
  killNode(2);
  ASSERT_EQ(finish(0), 0) << output(0);
  ASSERT_EQ(finish(1), 0) << output(1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    SCOPED_TRACE("node " + r + ":\n" + output(rank));
    EXPECT_TRUE(printed(rank,
                        "cumulus-run: generation 0: nodes 0,1,2, world size 3; this node is "
                        "node rank " +
                            r + " (ranks " + r + "-" + r + ")"));
    EXPECT_TRUE(printed(rank, "cumulus-run: restarting the group (restart 1 of 2)"));
    EXPECT_TRUE(printed(rank,
                        "cumulus-run: generation 1: nodes 0,1, world size 2; this node is "
                        "node rank " +
                            r + " (ranks " + r + "-" + r + ")"));
    EXPECT_TRUE(printed(rank, "[rank" + r +
                                  "] world size 3 -> 2: re-sharding each global batch "
                                  "of 64 from the global cursor"));
    EXPECT_TRUE(printed(rank, "after 40 epochs, 640 steps"));
    EXPECT_TRUE(printed(rank, "cumulus-run: all 1 worker(s) finished"));
  }
  // The survivors' workers failed with the communicator's typed error; one names the lost rank.
  const std::string failures =
      readFile(dir_ / "logs0/el/gen0/rank0.log") + readFile(dir_ / "logs1/el/gen0/rank1.log");
  const std::regex typed(R"(cumulus-train: error: \w+ seq \d+ with rank \d: peer closed)");
  EXPECT_TRUE(std::regex_search(failures, typed)) << failures;
  EXPECT_NE(failures.find("with rank 2: peer closed"), std::string::npos) << failures;
  // errors.jsonl on each survivor: its failed worker, unless the other node's failure reached
  // it first, then the regroup without node 2.
  int failed_workers = 0;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    const std::string errors = readFile(dir_ / ("logs" + r) / "el/errors.jsonl");
    const std::regex lines(
        R"(^(\{"time":"[0-9TZ:-]+","run_id":"el","generation":0,"rank":)" + r +
        R"(,"local_rank":0,"node_rank":)" + r + R"(,"pid":\d+,"exit_code":1,"log":".*/gen0/rank)" +
        r +
        R"(.log"\}\n)?)"
        R"(\{"time":"[0-9TZ:-]+","run_id":"el","generation":1,"event":"regroup",)"
        R"("lost_nodes":\[2\],"new_nodes":\[\],"nodes":\[0,1\],"world_size":2\}\n$)");
    std::smatch m;
    EXPECT_TRUE(std::regex_match(errors, m, lines)) << errors;
    failed_workers += m.size() > 1 && m[1].matched;
  }
  EXPECT_GE(failed_workers, 1);
  // The last checkpoint was written by the 2-worker group of generation 1.
  const cumulus::proto::CheckpointState state = newestCheckpoint(run / "checkpoints");
  EXPECT_EQ(state.world_size(), 2u);
  EXPECT_EQ(state.generation(), 1u);
  EXPECT_EQ(state.step(), 640u);  // every 20 steps, and the last of the 640
  EXPECT_LT(seconds, 30.0);
}

// A worker that runs collectives until stopped (the probe checks every sum).
std::string probe() {
  return kProbe + " --algorithms ring --sizes 65536 --target-seconds 100 --max-iters 100000 " +
         "--timeout 10";
}

TEST_F(ElasticTest, FewerThanMinNodesAfterALossEndTheJobNamingTheCount) {
  const std::string f =
      flags("2:3", "--recovery restart --rdzv-last-call 0.3 --rdzv-timeout 2 --max-restarts 3");
  start(0, f, probe());
  start(1, f, probe());
  ASSERT_TRUE(waitUntil([&] { return printed(0, "probe: 2 rank(s), data plane"); },
                        std::chrono::seconds(20)))
      << output(0);
  killNode(1);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(finish(0), 1) << output(0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(printed(0, "cumulus-run: restarting the group (restart 1 of 3)")) << output(0);
  const std::string last = output(0).substr(output(0).rfind("cumulus-run: "));
  EXPECT_EQ(last,
            "cumulus-run: giving up: only 1 node(s) joined the rendezvous of generation 1 within "
            "--rdzv-timeout 2 s (nodes 0), fewer than the 2 that --nnodes 2:3 needs\n");
  EXPECT_GE(seconds, 2.0);
  EXPECT_LT(seconds, 8.0);
}

TEST_F(ElasticTest, ALateNodeIsAdmittedByReformingTheGroupWithoutCountingARestart) {
  const std::string worker = (dir_ / "w.sh").string();
  std::ofstream(worker)
      << "#!/bin/sh\n"
      << "echo rank=$RANK of $WORLD_SIZE group=$GROUP_RANK gen=$CUMULUS_GENERATION"
         " restarts=$CUMULUS_RESTART_COUNT\n"
      << "if [ \"$CUMULUS_GENERATION\" = 0 ]; then exec sleep 30; fi\n";
  fs::permissions(worker, fs::perms::owner_all);
  const std::string f =
      flags("2:3", "--recovery restart --rdzv-last-call 0.3 --rdzv-timeout 10 --max-restarts 0");
  start(0, f, worker);
  start(1, f, worker);
  ASSERT_TRUE(
      waitUntil([&] { return printed(1, "[rank1] rank=1 of 2"); }, std::chrono::seconds(10)))
      << output(1);
  start(2, f, worker);
  EXPECT_EQ(finish(0), 0) << output(0);
  EXPECT_EQ(finish(1), 0) << output(1);
  EXPECT_EQ(finish(2), 0) << output(2);
  EXPECT_TRUE(
      printed(2,
              "cumulus-run: the group of generation 0 formed without this node (nodes 0,1); "
              "waiting in the rendezvous of generation 1\n"))
      << output(2);
  for (int rank : {0, 1}) {
    EXPECT_TRUE(printed(rank,
                        "cumulus-run: node(s) 2 waiting to join: the workers checkpoint and "
                        "stop (as for a preemption, within --preemption-grace 25.0 s), then "
                        "the group forms again; not counted as a restart\n"))
        << output(rank);
  }
  EXPECT_TRUE(printed(0,
                      "cumulus-run: generation 1: nodes 0,1,2, world size 3; this node is node "
                      "rank 0 (ranks 0-0)"))
      << output(0);
  // --max-restarts 0 and restarts=0: admitting a node is not a failure.
  EXPECT_TRUE(printed(0, "[rank0] rank=0 of 3 group=0 gen=1 restarts=0")) << output(0);
  EXPECT_TRUE(printed(1, "[rank1] rank=1 of 3 group=1 gen=1 restarts=0")) << output(1);
  EXPECT_TRUE(printed(2, "[rank2] rank=2 of 3 group=2 gen=1 restarts=0")) << output(2);
  EXPECT_FALSE(printed(2, "gen=0")) << output(2);
  const std::string errors = readFile(dir_ / "logs0/el/errors.jsonl");
  EXPECT_TRUE(std::regex_match(
      errors,
      std::regex(R"(\{"time":"[0-9TZ:-]+","run_id":"el","generation":1,"event":"regroup",)"
                 R"("lost_nodes":\[\],"new_nodes":\[2\],"nodes":\[0,1,2\],"world_size":3\}\n)")))
      << errors;
}

TEST_F(ElasticTest, ANodeAdmittedMidTrainingResumesFromTheStopStepLosingNoStep) {
  const fs::path run = dir_ / "run";
  const std::string train = kTrain + " " + kSmoke + " --set trainer.run_dir=" + run.string() +
                            " --set trainer.epochs=20 --set checkpoint.every_steps=20" +
                            " --set trainer.log_every_steps=1000 --set comm.algorithm=funnel" +
                            " --set trainer.log_all_ranks=true";  // node 2's summary, below
  const std::string f =
      flags("2:3", "--recovery restart --rdzv-last-call 0.5 --rdzv-timeout 20 --max-restarts 0");
  start(0, f, train);
  start(1, f, train);
  ASSERT_TRUE(waitUntil([&] { return fs::exists(run / "checkpoints" / "step-00000020"); },
                        std::chrono::seconds(30)))
      << output(0);
  start(2, f, train);
  ASSERT_EQ(finish(0), 0) << output(0);
  ASSERT_EQ(finish(1), 0) << output(1);
  ASSERT_EQ(finish(2), 0) << output(2);
  const std::string text = output(0);
  std::smatch stop;
  ASSERT_TRUE(std::regex_search(text, stop, std::regex(R"(\[rank0\] preempted at step (\d+), )")))
      << text;
  EXPECT_NE(text.find("[rank0] resuming from " + (run / "checkpoints").string() + "/step-" +
                      std::string(8 - stop[1].str().size(), '0') + stop[1].str() + " at step " +
                      stop[1].str() + " "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[rank0] world size 2 -> 3: re-sharding"), std::string::npos) << text;
  // The funnel's parameter server serves one world size: node 0 started one per group.
  const std::regex ps("cumulus-run: parameter server \\(funnel\\) on 127\\.0\\.0\\.1:\\d+\\n");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(text.begin(), text.end(), ps), std::sregex_iterator()), 2)
      << text;
  EXPECT_NE(output(2).find("after 20 epochs, 320 steps"), std::string::npos) << output(2);
  const cumulus::proto::CheckpointState state = newestCheckpoint(run / "checkpoints");
  EXPECT_EQ(state.world_size(), 3u);
  EXPECT_EQ(state.generation(), 1u);
}

TEST_F(ElasticTest, AReplacementNodeTakesTheLostOnesPlaceInAFixedSizeJob) {
  // Generation 0 all-reduces until node 1 is lost; later generations finish at once.
  const std::string worker = (dir_ / "probe.sh").string();
  std::ofstream(worker) << "#!/bin/sh\nif [ \"$CUMULUS_GENERATION\" = 0 ]; then exec " << probe()
                        << "; fi\nexec " << kProbe
                        << " --algorithms ring --sizes 4096 --max-iters 2 --timeout 10\n";
  fs::permissions(worker, fs::perms::owner_all);
  const std::string f = flags("2", "--recovery restart --rdzv-timeout 20 --max-restarts 1");
  start(0, f, worker);
  start(1, f, worker);
  ASSERT_TRUE(waitUntil([&] { return printed(0, "probe: 2 rank(s), data plane"); },
                        std::chrono::seconds(20)))
      << output(0);
  killNode(1);
  ASSERT_TRUE(
      waitUntil([&] { return printed(0, "restarting the group"); }, std::chrono::seconds(20)))
      << output(0);
  std::filesystem::rename(out(1), dir_ / "node1.lost.out");
  start(1, f, worker);  // the same --node-rank on a new "host"
  EXPECT_EQ(finish(0), 0) << output(0);
  EXPECT_EQ(finish(1), 0) << output(1);
  EXPECT_TRUE(printed(1,
                      "cumulus-run: the group of generation 0 formed without this node (nodes "
                      "0,1); waiting in the rendezvous of generation 1\n"))
      << output(1);
  for (int rank : {0, 1}) {
    EXPECT_TRUE(printed(rank,
                        "cumulus-run: generation 1: nodes 0,1, world size 2; this node is "
                        "node rank " +
                            std::to_string(rank)))
        << output(rank);
  }
  // Generation 1 ran its collectives to the end (the probe checks every sum).
  const std::string gen1 = readFile(dir_ / "logs0/el/gen1/rank0.log");
  EXPECT_NE(gen1.find("probe: 2 rank(s)"), std::string::npos) << gen1;
}

TEST_F(ElasticTest, APreemptionNoticeDuringTheRendezvousIsResumableAndReleasesTheOthers) {
  // Nodes 0 and 1 of 3 wait for node 2; SIGTERM to node 0 ends the round for both.
  const std::string f = flags("3", "--rdzv-timeout 20");
  start(0, f, "/bin/true");
  ASSERT_TRUE(
      waitUntil([&] { return printed(0, "cumulus-run: run el"); }, std::chrono::seconds(10)))
      << output(0);
  start(1, f, "/bin/true");
  // Node 1 in the round, waiting: read the round from node 0's Store as any node would.
  cumulus::comm::StoreClient store("127.0.0.1", port_, "elastic-test");
  cumulus::launch::RendezvousRound observer(store, cumulus::launch::RendezvousOptions{},
                                            cumulus::launch::RoundNode{99, 1, "observer"});
  const auto both_wait = [&] { return observer.waiting(0) == std::vector<int64_t>{0, 1}; };
  ASSERT_TRUE(waitUntil(both_wait, std::chrono::seconds(10))) << output(1);
  ::kill(nodes_[0].pid, SIGTERM);
  EXPECT_EQ(finish(0, 10), 75) << output(0);
  EXPECT_TRUE(printed(0,
                      "cumulus-run: preemption notice (SIGTERM) during the rendezvous of "
                      "generation 0; no worker was running; launch the same command again to "
                      "resume\n"))
      << output(0);
  EXPECT_EQ(finish(1, 10), 75) << output(1);  // node 0's code: resumable
  EXPECT_TRUE(printed(1,
                      "cumulus-run: preempted: the job ended (node 0's launcher was stopped by "
                      "SIGTERM, exit code 75) before this node could join\n"))
      << output(1);
}

TEST_F(ElasticTest, LosingNodeZeroEndsTheJobBecauseItHostsTheStore) {
  const std::string f = flags("1:2", "--rdzv-last-call 0.2 --rdzv-timeout 2 --max-restarts 3");
  start(0, f, "/bin/sleep 30");
  start(1, f, "/bin/sleep 30");
  ASSERT_TRUE(
      waitUntil([&] { return printed(1, "generation 0: nodes 0,1"); }, std::chrono::seconds(10)))
      << output(1);
  killNode(0);
  EXPECT_EQ(finish(1, 15), 1) << output(1);
  const std::string text = output(1);
  EXPECT_NE(text.find("cumulus-run: giving up: the rendezvous Store on node 0 (127.0.0.1:" +
                      std::to_string(port_) + ") is unreachable: "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("; node 0 hosts the Store, so the job cannot go on without it: launch it "
                      "again on every node to resume from the newest checkpoint\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("restarting the group"), std::string::npos) << text;
}

// Recovery in place: a worker that waits for the test's release file, saying who it is and
// leaving with 75 on SIGTERM (the trainer's stop after a notice).
std::string inPlaceWorker(const fs::path& dir) {
  const std::string path = (dir / "w.sh").string();
  std::ofstream(path)
      << "#!/bin/sh\n"
      << "trap 'echo $CUMULUS_MEMBER_ID >> " << (dir / "left").string() << "; exit 75' TERM\n"
      << "echo rank=$RANK of $WORLD_SIZE gen=$CUMULUS_GENERATION member=$CUMULUS_MEMBER_ID"
         " join=${CUMULUS_JOIN-none} min=$CUMULUS_MIN_WORKERS max=$CUMULUS_MAX_WORKERS\n"
      << "touch " << (dir / "ready.").string() << "$CUMULUS_MEMBER_ID\n"
      << "while [ ! -f " << (dir / "release").string() << " ]; do sleep 0.02; done\n"
      << "echo done member=$CUMULUS_MEMBER_ID\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

TEST_F(ElasticTest, InPlaceANoticeEndsOneNodeWith75AndTheOtherGoesOn) {
  const std::string worker = inPlaceWorker(dir_);
  const std::string f = flags("1:2", "--recovery in_place --rdzv-last-call 5 --rdzv-timeout 10");
  start(0, f, worker);
  start(1, f, worker);
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir_ / "ready.0.0.0"); }, std::chrono::seconds(20)))
      << output(0);
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir_ / "ready.1.0.0"); }, std::chrono::seconds(20)))
      << output(1);
  ::kill(nodes_[1].pid, SIGTERM);
  EXPECT_EQ(finish(1, 20), 75) << output(1);
  EXPECT_TRUE(printed(1,
                      "cumulus-run: preemption notice (SIGTERM); asking the workers to "
                      "checkpoint and stop within 25.0 s\n"))
      << output(1);
  EXPECT_TRUE(printed(1, "cumulus-run: preempted (notice to exit ")) << output(1);
  // Node 0 and its worker are untouched: only node 1's worker left.
  EXPECT_EQ(readFile(dir_ / "left"), "1.0.0\n");
  EXPECT_EQ(::waitpid(nodes_[0].pid, nullptr, WNOHANG), 0) << output(0);
  std::ofstream(dir_ / "release") << "";
  EXPECT_EQ(finish(0, 10), 0) << output(0);  // without waiting for node 1 to say it finished
  EXPECT_TRUE(printed(0, "[rank0] done member=0.0.0\n")) << output(0);
  EXPECT_TRUE(printed(0, "cumulus-run: all 1 worker(s) finished\n")) << output(0);
  EXPECT_FALSE(printed(0, "not every node")) << output(0);
  EXPECT_FALSE(printed(0, "stopping")) << output(0);
}

TEST_F(ElasticTest, InPlaceALateNodeJoinsTheRunningGroupWithoutReformingIt) {
  const std::string worker = inPlaceWorker(dir_);
  const std::string f =
      flags("2:3", "--recovery in_place --rdzv-last-call 0.3 --rdzv-timeout 10 --max-restarts 0");
  start(0, f, worker);
  start(1, f, worker);
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir_ / "ready.1.0.0"); }, std::chrono::seconds(20)))
      << output(1);
  start(2, f, worker);
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir_ / "ready.2.0.0"); }, std::chrono::seconds(20)))
      << output(2);
  std::ofstream(dir_ / "release") << "";
  EXPECT_EQ(finish(0), 0) << output(0);
  EXPECT_EQ(finish(1), 0) << output(1);
  EXPECT_EQ(finish(2), 0) << output(2);
  EXPECT_TRUE(printed(2,
                      "cumulus-run: the group of generation 0 (nodes 0,1) is already running; "
                      "this node's 1 worker(s) join it in place\n"))
      << output(2);
  // Under the running generation, named by its own node id, RANK and WORLD_SIZE placeholders.
  EXPECT_TRUE(printed(2, "[member2.0.0] rank=0 of 2 gen=0 member=2.0.0 join=1 min=2 max=3\n"))
      << output(2);
  EXPECT_TRUE(printed(2, "[member2.0.0] done member=2.0.0\n")) << output(2);
  EXPECT_TRUE(printed(0, "[rank0] rank=0 of 2 gen=0 member=0.0.0 join=none min=2 max=3\n"))
      << output(0);
  EXPECT_TRUE(printed(1, "[rank1] rank=1 of 2 gen=0 member=1.0.0 join=none min=2 max=3\n"))
      << output(1);
  for (int rank : {0, 1}) {
    EXPECT_FALSE(printed(rank, "waiting to join")) << output(rank);
    EXPECT_FALSE(printed(rank, "generation 1")) << output(rank);
  }
  EXPECT_FALSE(fs::exists(dir_ / "left"));                  // nobody was asked to stop
  EXPECT_FALSE(printed(0, "not every node")) << output(0);  // node 0 waited for node 2 too
}

TEST_F(ElasticTest, InPlaceLosingNodeZeroStillEndsTheJobBecauseItHostsTheStore) {
  const std::string worker = inPlaceWorker(dir_);
  const std::string f = flags("1:2", "--recovery in_place --rdzv-last-call 5 --rdzv-timeout 2");
  start(0, f, worker);
  start(1, f, worker);
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir_ / "ready.1.0.0"); }, std::chrono::seconds(20)))
      << output(1);
  killNode(0);
  EXPECT_EQ(finish(1, 15), 1) << output(1);
  EXPECT_TRUE(printed(1, "cumulus-run: giving up: the rendezvous Store on node 0 (127.0.0.1:" +
                             std::to_string(port_) + ") is unreachable: "))
      << output(1);
  EXPECT_FALSE(printed(1, "restarting the group")) << output(1);
}

}  // namespace
