// Recovery in place with real worker processes started by hand, as cumulus-run starts them with
// `launch.recovery: in_place`: the test hosts the gRPC Store and plays the agent's part (it marks
// a worker that died gone in the Store, and starts joiners). Faults come from
// cumulus-train-faults: --fault-kill STEP@MEMBER (a real SIGKILL of the worker), --fault-stall,
// --fault-sigterm-at-step S@MEMBER (a notice). Each worker writes a sample ledger
// (PATH.member<ID>, launch = the epoch's communicator generation), and every replica prints the
// SHA-256 of its final parameters.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/quorum.h"
#include "comm/store_client.h"
#include "comm/store_keys.h"
#include "comm/store_server.h"
#include "tests/test_dir.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"
#include "trainer/resume.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;
using cumulus::testing::Env;
using cumulus::testing::lastAfter;
using cumulus::testing::ProcessResult;
using cumulus::testing::runProcess;
using cumulus::testing::withFaults;

constexpr const char* kToken = "in-place-test-token";

// One worker process: its id, and how it ended.
struct Worker {
  std::string id;
  std::thread thread;
  ProcessResult result;
};

class InPlaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = cumulus::testing::freshTestDir("in_place");
    server_ = std::make_unique<comm::StoreServer>("127.0.0.1", 0, kToken);
    store_ = std::make_unique<comm::StoreClient>("127.0.0.1", server_->port(), kToken);
  }
  void TearDown() override {
    for (auto& [id, w] : workers_) {
      if (w->thread.joinable()) w->thread.join();
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // cumulus-train-faults with `faults` over smoke.yaml: 3 epochs of 16 steps, every rank printing
  // its results, and `timeout` as comm.timeout_seconds (small, so that a stalled peer is declared
  // dead soon; not so small that a loaded machine trips it).
  std::vector<std::string> command(std::vector<std::string> faults, const std::string& run,
                                   int timeout = 10) {
    faults.push_back("--sample-ledger");
    faults.push_back((dir_ / "ledger").string());
    return withFaults(faults, {"cumulus-train", CUMULUS_SOURCE_DIR "/configs/smoke.yaml", "--set",
                               "trainer.run_dir=" + (dir_ / run).string(), "--set",
                               "trainer.epochs=3", "--set", "trainer.log_all_ranks=true", "--set",
                               "comm.timeout_seconds=" + std::to_string(timeout), "--set",
                               "trainer.log_every_steps=16"});
  }

  // Starts a worker: rank `rank` of `world` of the launch, or a joiner (rank < 0).
  void start(const std::string& id, int rank, int world, const std::vector<std::string>& argv) {
    Env env = cumulus::testing::aloneEnv({{"RANK", std::to_string(std::max(rank, 0))},
                                          {"WORLD_SIZE", std::to_string(world)},
                                          {"LOCAL_RANK", "0"},
                                          {"LOCAL_WORLD_SIZE", "1"},
                                          {"MASTER_ADDR", "127.0.0.1"},
                                          {"MASTER_PORT", std::to_string(server_->port())},
                                          {"CUMULUS_JOB_TOKEN", kToken},
                                          {"CUMULUS_RUN_ID", "in-place"},
                                          {"CUMULUS_GENERATION", "0"},
                                          {"CUMULUS_RECOVERY", "in_place"},
                                          {"CUMULUS_MEMBER_ID", id},
                                          {"CUMULUS_JOIN", rank < 0 ? "1" : ""}});
    auto worker = std::make_unique<Worker>();
    worker->id = id;
    Worker* w = worker.get();
    workers_[id] = std::move(worker);
    w->thread = std::thread([this, w, argv, env] {
      w->result = runProcess(
          argv, env, [this](const std::string& line, pid_t) { seen(line); }, 180);
      // The agent's part: a worker that died is marked gone at once.
      if (w->result.signal != 0) {
        comm::Quorum::markGone(*store_, 0, w->id, "signal " + std::to_string(w->result.signal));
      }
    });
  }

  void startGroup(int world, const std::vector<std::string>& argv) {
    for (int r = 0; r < world; ++r) start("0." + std::to_string(r) + ".0", r, world, argv);
  }

  // Blocks until some worker printed a line containing `text`.
  void waitForLine(const std::string& text) {
    std::unique_lock<std::mutex> lock(mutex_);
    ASSERT_TRUE(changed_.wait_for(lock, std::chrono::seconds(120),
                                  [&] {
                                    for (const std::string& l : lines_) {
                                      if (l.find(text) != std::string::npos) return true;
                                    }
                                    return false;
                                  }))
        << "no worker printed '" << text << "'";
  }

  const ProcessResult& finish(const std::string& id) {
    Worker& w = *workers_.at(id);
    if (w.thread.joinable()) w.thread.join();
    return w.result;
  }

  // Every surviving worker exited 0 with the same final parameters; returns them.
  std::string identicalReplicas(const std::set<std::string>& survivors) {
    std::set<std::string> digests;
    for (const std::string& id : survivors) {
      const ProcessResult& r = finish(id);
      EXPECT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
      const std::string digest = lastAfter(r.output, "final parameters sha256 ");
      EXPECT_EQ(digest.size(), 64u) << id << ":\n" << r.output;
      digests.insert(digest);
    }
    EXPECT_EQ(digests.size(), 1u) << "the replicas differ";
    return digests.empty() ? "" : *digests.begin();
  }

  // Every sample of each of the 3 epochs trained exactly once, counting each step in the epoch
  // (communicator generation) that last ran it.
  void ledgerIsExact() {
    SampleLedger book;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind("ledger.member", 0) == 0) {
        book.readFile(entry.path().string());
      }
    }
    book.dropReplayedSteps();
    std::set<int64_t> all;
    for (int64_t i = 0; i < 1024; ++i) all.insert(i);
    EXPECT_EQ(book.epochs(), (std::set<int64_t>{0, 1, 2}));
    for (int64_t epoch : book.epochs()) {
      for (const std::string& problem : book.checkEpoch(epoch, all)) ADD_FAILURE() << problem;
    }
  }

  // Waits for every worker of this job and makes a new Store for the next: another job.
  void nextJob() {
    for (auto& [id, w] : workers_) finish(id);
    workers_.clear();
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind("ledger", 0) == 0) fs::remove(entry.path());
    }
    server_ = std::make_unique<comm::StoreServer>("127.0.0.1", 0, kToken);
    store_ = std::make_unique<comm::StoreClient>("127.0.0.1", server_->port(), kToken);
  }

  void seen(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back(line);
    changed_.notify_all();
  }

  fs::path dir_;
  std::unique_ptr<comm::StoreServer> server_;
  std::unique_ptr<comm::StoreClient> store_;
  std::map<std::string, std::unique_ptr<Worker>> workers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;
};

// Two workers of four are SIGKILLed, at steps 10 and 25: the survivors re-form without a restart,
// train every sample once, end identical, and the same schedule gives the same bits again.
TEST_F(InPlaceTest, SurvivorsOfKillsTrainOnBitIdenticallyRunAfterRun) {
  std::string first;
  for (int run = 0; run < 2; ++run) {
    const std::string name = "run" + std::to_string(run);
    startGroup(4, command({"--fault-kill", "10@0.1.0,25@0.3.0"}, name));
    EXPECT_EQ(finish("0.1.0").signal, SIGKILL);
    EXPECT_EQ(finish("0.3.0").signal, SIGKILL);
    const std::string digest = identicalReplicas({"0.0.0", "0.2.0"});
    const std::string& out = finish("0.0.0").output;
    EXPECT_NE(out.find("re-formed in place: epoch 1, rank 0 of 3 (was rank 0 of 4), training "
                       "from step 10"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("re-formed in place: epoch 2, rank 0 of 2 (was rank 0 of 3), training "
                       "from step 25"),
              std::string::npos)
        << out;
    ledgerIsExact();
    if (run == 0) first = digest;
    EXPECT_EQ(digest, first) << "the same failure schedule gave other parameters";
    for (auto& [id, w] : workers_) finish(id);
    workers_.clear();
    fs::remove_all(dir_ / "run0");
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind("ledger", 0) == 0) fs::remove(entry.path());
    }
    // The next run is another job: a Store of its own.
    server_ = std::make_unique<comm::StoreServer>("127.0.0.1", 0, kToken);
    store_ = std::make_unique<comm::StoreClient>("127.0.0.1", server_->port(), kToken);
  }
}

// Two deaths at the same step, one of them mid-step (SIGKILL 5 ms after drawing the batch).
TEST_F(InPlaceTest, TwoSimultaneousDeaths) {
  startGroup(4, command({"--fault-kill", "12@0.0.0,12@0.2.0+5"}, "run"));
  identicalReplicas({"0.1.0", "0.3.0"});
  ledgerIsExact();
}

// A worker dies just as the group starts re-forming after another one's death: the re-forming
// goes on without both.
TEST_F(InPlaceTest, ADeathWhileTheGroupReforms) {
  startGroup(4, command({"--fault-kill", "10@0.1.0", "--fault-kill-on",
                         "0.2.0:re-forming the group in place"},
                        "run"));
  EXPECT_EQ(finish("0.2.0").signal, SIGKILL);
  identicalReplicas({"0.0.0", "0.3.0"});
  ledgerIsExact();
}

// The state's sender dies as the heal starts: the joiner has applied nothing, the group re-forms
// again and the other survivor, which holds the same step, sends it instead.
TEST_F(InPlaceTest, TheSendersDeathDuringAHealHandsItToAnotherPeer) {
  const auto argv = command(
      {"--fault-hold-for-joiner", "5", "--fault-kill-on", "0.0.0:sends the training state"}, "run");
  startGroup(2, argv);
  start("1.0.0", -1, 2, argv);
  EXPECT_EQ(finish("0.0.0").signal, SIGKILL);
  identicalReplicas({"0.1.0", "1.0.0"});
  const std::string& out = finish("1.0.0").output;
  EXPECT_NE(out.find("state sent by rank 0 to rank(s) 1"), std::string::npos) << out;
  ledgerIsExact();
}

// comm.compression bf16 in place: a worker dies mid-step, the survivors redo the step from the
// error-feedback residuals they held before it (the sync adopts a step's residuals only when its
// all-reduce succeeded) and a joiner starts from zero residuals; the replicas stay identical and
// every sample is trained once.
TEST_F(InPlaceTest, ACompressedGroupRecoversAndHealsInPlace) {
  auto argv = command({"--fault-kill", "10@0.1.0+5", "--fault-hold-for-joiner", "5"}, "run");
  argv.insert(argv.end(), {"--set", "comm.compression=bf16"});
  startGroup(3, argv);
  start("1.0.0", -1, 3, argv);
  EXPECT_EQ(finish("0.1.0").signal, SIGKILL);
  identicalReplicas({"0.0.0", "0.2.0", "1.0.0"});
  ledgerIsExact();
}

// trainer.sync diloco in place (4 inner steps, 2 fragments, int8, overlap): a joiner takes the
// global parameters and outer state from a live peer, a worker is SIGKILLed mid-round, the
// survivors drop its inner steps from the round and train on; the last boundary syncs every
// fragment, so every replica ends identical, and every sample is trained once.
TEST_F(InPlaceTest, ADilocoGroupDropsADeadWorkerMidRoundAndHealsAJoiner) {
  auto argv = command({"--fault-kill", "10@0.1.0+5", "--fault-hold-for-joiner", "5"}, "run");
  argv.insert(argv.end(), {"--set", "trainer.sync=diloco", "--set", "diloco.inner_steps=4", "--set",
                           "diloco.fragments=2", "--set", "diloco.overlap=true", "--set",
                           "diloco.outer_compression=int8"});
  startGroup(3, argv);
  start("1.0.0", -1, 3, argv);
  EXPECT_EQ(finish("0.1.0").signal, SIGKILL);
  identicalReplicas({"0.0.0", "0.2.0", "1.0.0"});
  const std::string& out = finish("0.0.0").output;
  // The death is seen in the step it happens (DiLoCo's per-step check) and the survivors
  // re-form: after the joiner came in (4 members), before it did (2), or in the same re-forming
  // that lets it in (3, as before), which depends on the machine's load.
  EXPECT_TRUE(out.find("rank 0 of 3 (was rank 0 of 4), training from step ") != std::string::npos ||
              out.find("rank 0 of 2 (was rank 0 of 3), training from step ") != std::string::npos ||
              out.find("rank 0 of 3, training from step ") != std::string::npos)
      << out;
  ledgerIsExact();
}

// A notice to one worker: it leaves at the agreed step with exit 75 and writes no checkpoint; the
// others shrink the group and train on.
TEST_F(InPlaceTest, ANoticeLeavesAtAStepBoundaryAndTheOthersTrainOn) {
  startGroup(3, command({"--fault-sigterm-at-step", "20@0.1.0"}, "run"));
  const ProcessResult& left = finish("0.1.0");
  EXPECT_EQ(left.exit_code, 75) << left.output;
  EXPECT_NE(left.output.find("preempted at step 20: rank 1 leaves the group, which trains on with "
                             "2 worker(s); no checkpoint needed"),
            std::string::npos)
      << left.output;
  identicalReplicas({"0.0.0", "0.2.0"});
  EXPECT_FALSE(fs::exists(dir_ / "run" / "checkpoints" / "step-00000020"));
  ledgerIsExact();
}

// trainer.balance: auto with a slow worker (rank 2 of 3, 1.5 ms per sample): the shares move off
// it; when another worker dies, the group re-forms with equal shares, and still every sample of
// every epoch is trained exactly once.
TEST_F(InPlaceTest, AReformingStartsTheSharesEqualAgain) {
  std::vector<std::string> argv =
      command({"--fault-kill", "10@0.1.0", "--fault-slow", "2+1500"}, "run");
  for (const char* kv : {"trainer.balance=auto", "trainer.balance_every_steps=4"}) {
    argv.push_back("--set");
    argv.push_back(kv);
  }
  startGroup(3, argv);
  EXPECT_EQ(finish("0.1.0").signal, SIGKILL);
  identicalReplicas({"0.0.0", "0.2.0"});
  ledgerIsExact();
  std::ifstream in(dir_ / "run" / "metrics.jsonl");
  std::vector<nlohmann::json> balance;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("type") == "balance") balance.push_back(std::move(j));
  }
  ASSERT_GE(balance.size(), 3u);
  EXPECT_EQ(balance[0].at("shares"), nlohmann::json::array({21, 21, 22}));
  EXPECT_EQ(balance[1].at("reason"), "auto");
  EXPECT_LT(balance[1].at("step").get<int64_t>(), 10);
  const auto moved = balance[1].at("shares").get<std::vector<int64_t>>();
  ASSERT_EQ(moved.size(), 3u);
  EXPECT_LT(moved[2], moved[0]);
  const auto reform = std::find_if(balance.begin(), balance.end(), [](const nlohmann::json& j) {
    return j.at("reason") == "reform";
  });
  ASSERT_NE(reform, balance.end());
  EXPECT_EQ(reform->at("step"), 10);
  EXPECT_EQ(reform->at("shares"), nlohmann::json::array({32, 32}));
}

// A joiner is admitted at a step boundary and takes the whole state from a live peer, reading no
// checkpoint; afterwards every replica is identical.
TEST_F(InPlaceTest, AJoinerHealsFromALivePeer) {
  const auto argv = command({"--fault-hold-for-joiner", "5"}, "run");
  startGroup(2, argv);
  start("1.0.0", -1, 2, argv);
  identicalReplicas({"0.0.0", "0.1.0", "1.0.0"});
  const std::string& out = finish("1.0.0").output;
  EXPECT_NE(out.find("re-formed in place: epoch 1, rank 2 of 3"), std::string::npos) << out;
  EXPECT_NE(out.find("state sent by rank 0 to rank(s) 2"), std::string::npos) << out;
  EXPECT_EQ(out.find("checkpoint"), std::string::npos) << out;
  ledgerIsExact();
}

// A worker that only stalls (8 s) past the others' timeout (3 s) is left out (nobody marks it gone:
// the window closes the epoch without it); when it wakes its old epoch is gone, it joins again and
// is healed.
TEST_F(InPlaceTest, AStalledWorkerIsFencedOutAndRejoinsThroughTheHeal) {
  startGroup(3, command({"--fault-stall", "10@0.2.0+8000", "--fault-hold-for-joiner", "20"}, "run",
                        /*timeout=*/3));
  identicalReplicas({"0.0.0", "0.1.0", "0.2.0"});
  const std::string& out = finish("0.2.0").output;
  EXPECT_NE(out.find("re-formed in place: epoch 2, rank 2 of 3"), std::string::npos) << out;
  ledgerIsExact();
}

// Deaths at the edges of a run (3 epochs of 16 steps): as the first step is drawn and in the
// middle of it, in the middle of the last step, and in the last step's boundary once every member
// committed it (its record's sum over the ranks), where the survivors re-form from step 48 and
// run the last boundary again rather than skip it. Every run ends, with identical replicas and an
// exact ledger.
TEST_F(InPlaceTest, DeathsInTheFirstAndTheLastStepEndTheRun) {
  const std::vector<std::vector<std::string>> cases = {{"--fault-kill", "0@0.1.0"},
                                                       {"--fault-kill", "0@0.1.0+5"},
                                                       {"--fault-kill", "47@0.1.0+5"},
                                                       {"--fault-kill-in-record", "48@0.1.0"}};
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(cases[c][0] + " " + cases[c][1]);
    startGroup(3, command(cases[c], "run" + std::to_string(c)));
    EXPECT_EQ(finish("0.1.0").signal, SIGKILL) << finish("0.1.0").output;
    identicalReplicas({"0.0.0", "0.2.0"});
    ledgerIsExact();
    if (c + 1 == cases.size()) {
      EXPECT_NE(finish("0.0.0").output.find("training from step 48"), std::string::npos)
          << finish("0.0.0").output;
    }
    nextJob();
    if (HasFailure()) break;
  }
}

// Seeded random schedules of SIGKILLs (at a batch or mid-step) and notices on 4 workers, a quarter
// of them with a death in the first step and a quarter in the last: every one ends with an exact
// ledger and identical replicas.
TEST_F(InPlaceTest, RandomSchedulesOfDeathsAndNotices) {
  for (int seed = 0; seed < 24; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 random(static_cast<uint32_t>(seed));
    std::vector<std::string> ids = {"0.0.0", "0.1.0", "0.2.0", "0.3.0"};
    std::shuffle(ids.begin(), ids.end(), random);
    const int events = 1 + static_cast<int>(random() % 3);  // at least one survivor
    std::string kills;
    std::string notice;
    std::set<std::string> survivors(ids.begin(), ids.end());
    for (int e = 0; e < events; ++e) {
      int step = static_cast<int>(random() % 48);
      if (e == 0 && seed % 4 == 1) step = 0;   // the first step
      if (e == 0 && seed % 4 == 2) step = 47;  // the last
      if (notice.empty() && random() % 3 == 0) {
        notice = std::to_string(step + 1) + "@" + ids[e];  // after the step: 1-based
      } else {
        kills += (kills.empty() ? "" : ",") + std::to_string(step) + "@" + ids[e] +
                 (random() % 2 ? "+" + std::to_string(1 + random() % 20) : "");
      }
      survivors.erase(ids[e]);
    }
    std::vector<std::string> faults;
    if (!kills.empty()) faults = {"--fault-kill", kills};
    if (!notice.empty()) {
      faults.push_back("--fault-sigterm-at-step");
      faults.push_back(notice);
    }
    startGroup(4, command(faults, "run" + std::to_string(seed)));
    identicalReplicas(survivors);
    ledgerIsExact();
    nextJob();
    if (HasFailure()) break;
  }
}

// The same under cumulus-run --recovery in_place, as a user starts it: the agent marks the killed
// worker gone and starts a replacement (member 0.1.1), which joins and is healed; no process but
// the killed one ends early, and the run ends with identical replicas and an exact ledger.
TEST_F(InPlaceTest, UnderCumulusRunAKilledWorkerIsReplacedAndHealed) {
  const std::vector<std::string> train =
      command({"--fault-kill", "10@0.1.0", "--fault-hold-for-joiner", "30"}, "run");
  std::vector<std::string> argv = cumulus::testing::groupOf(
      3, (dir_ / "logs").string(), train, {"--recovery=in_place", "--max-restarts=1"});
  const ProcessResult r = runProcess(argv, cumulus::testing::aloneEnv(), {}, 180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: rank 1 (member 0.1.0) died (signal SIGKILL); the group "
                          "goes on without it; starting a replacement (member 0.1.1), restart 1 of "
                          "1"),
            std::string::npos)
      << r.output;
  const std::vector<std::string> finals = cumulus::testing::everyDigest(r.output);
  EXPECT_EQ(finals.size(), 3u) << "every replica, the replacement included, finishes: " << r.output;
  EXPECT_EQ(std::set<std::string>(finals.begin(), finals.end()).size(), 1u) << r.output;
  EXPECT_NE(r.output.find("state sent by rank 0 to rank(s) 2"), std::string::npos) << r.output;
  ledgerIsExact();
}

// A worker lost during start-up, before the first step, under cumulus-run: the other two re-form
// in place inside their start-up (they do not exit), the agent starts a replacement, which joins
// at a step boundary and is healed, and the job ends with three identical replicas.
TEST_F(InPlaceTest, UnderCumulusRunADeathDuringStartUpIsReplacedAndHealed) {
  const std::vector<std::string> train =
      command({"--fault-kill-at-start", "0.1.0", "--fault-hold-for-joiner", "30"}, "run");
  std::vector<std::string> argv = cumulus::testing::groupOf(
      3, (dir_ / "logs").string(), train, {"--recovery=in_place", "--max-restarts=1"});
  const ProcessResult r = runProcess(argv, cumulus::testing::aloneEnv(), {}, 180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: rank 1 (member 0.1.0) died (signal SIGKILL); the group "
                          "goes on without it; starting a replacement (member 0.1.1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("training from step 0"), std::string::npos) << r.output;
  const std::vector<std::string> finals = cumulus::testing::everyDigest(r.output);
  EXPECT_EQ(finals.size(), 3u) << "every replica, the replacement included, finishes: " << r.output;
  EXPECT_EQ(std::set<std::string>(finals.begin(), finals.end()).size(), 1u) << r.output;
  ledgerIsExact();
}

// Every member of the group dies (both workers, at the same step): a replacement would have no one
// to join and nothing to heal from, so the agent, seeing in the Store that no member is left,
// restarts the group (from step 0: no checkpoint yet), which trains to the end.
TEST_F(InPlaceTest, UnderCumulusRunAGroupWhoseEveryMemberDiedRestarts) {
  const std::vector<std::string> train =
      command({"--fault-kill", "10@0.0.0,10@0.1.0", "--faults-in-generation", "0"}, "run");
  std::vector<std::string> argv = cumulus::testing::groupOf(
      2, (dir_ / "logs").string(), train, {"--recovery=in_place", "--max-restarts=3"});
  const ProcessResult r = runProcess(argv, cumulus::testing::aloneEnv(), {}, 180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("and no member of the group holds the training state any more; "
                          "stopping the group to restart it"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("not admitted"), std::string::npos) << r.output;
  const std::vector<std::string> finals = cumulus::testing::everyDigest(r.output);
  EXPECT_EQ(finals.size(), 2u) << r.output;
  EXPECT_EQ(std::set<std::string>(finals.begin(), finals.end()).size(), 1u) << r.output;
}

}  // namespace
}  // namespace cumulus::trainer
