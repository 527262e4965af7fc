// cumulus::Elastic (<cumulus/elastic.h>) with real worker processes (cumulus-elastic-worker)
// started as cumulus-run starts them with recovery in place: the test hosts the gRPC Store and
// plays the launcher's part (a worker that exits is marked gone; replacements are started by
// hand). What a member that must not train on a state does: a replacement built from another
// configuration, or whose tensors differ, refuses the state a live peer sends, names the peer and
// what differs, and stops; the others re-form without it and admit a good replacement.

#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/quorum.h"
#include "comm/store_client.h"
#include "comm/store_server.h"
#include "tests/trainer/process_runner.h"
#include "tests/trainer/worker_commands.h"

namespace cumulus {
namespace {

using testing::Args;
using testing::Env;
using testing::ProcessResult;
using testing::runProcess;

constexpr const char* kToken = "elastic-test-token";
const std::string kWorker = CUMULUS_BINARY_DIR "/bin/cumulus-elastic-worker";

class ElasticProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<comm::StoreServer>("127.0.0.1", 0, kToken);
    store_ = std::make_unique<comm::StoreClient>("127.0.0.1", server_->port(), kToken);
  }
  void TearDown() override {
    for (auto& [id, w] : workers_) {
      if (w.joinable()) w.join();
    }
  }

  // A worker with `flags`: rank `rank` of a launch of `world`, or a replacement (rank < 0). When
  // it ends with anything but 0 it is marked gone, as cumulus-run does.
  void start(const std::string& id, int rank, int world, const Args& flags,
             const std::string& min_workers = "1", const std::string& recovery = "in_place") {
    Env env = testing::aloneEnv({{"CUMULUS_MIN_WORKERS", min_workers},
                                 {"RANK", std::to_string(std::max(rank, 0))},
                                 {"WORLD_SIZE", std::to_string(world)},
                                 {"LOCAL_RANK", "0"},
                                 {"LOCAL_WORLD_SIZE", "1"},
                                 {"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", std::to_string(server_->port())},
                                 {"CUMULUS_JOB_TOKEN", kToken},
                                 {"CUMULUS_RUN_ID", "elastic"},
                                 {"CUMULUS_GENERATION", "0"},
                                 {"CUMULUS_RECOVERY", recovery},
                                 {"CUMULUS_MEMBER_ID", id},
                                 {"CUMULUS_JOIN", rank < 0 ? "1" : ""}});
    Args argv = {kWorker};
    argv.insert(argv.end(), flags.begin(), flags.end());
    // The node is made here, on the test's thread; the worker's thread writes only into it.
    ProcessResult* slot = &results_[id];
    workers_[id] = std::thread([this, id, argv, env, slot] {
      ProcessResult r = runProcess(argv, env, {}, 180);
      if (r.exit_code != 0)
        comm::Quorum::markGone(*store_, 0, id, "exit " + std::to_string(r.exit_code));
      *slot = std::move(r);
    });
  }

  const ProcessResult& finish(const std::string& id) {
    if (workers_[id].joinable()) workers_[id].join();
    return results_[id];
  }

  // Two launch members waiting for a third; a bad replacement `bad`, then a good one. Returns the
  // bad one's output.
  std::string refusedThenHealed(const Args& good, const Args& bad) {
    Args launch = good;
    launch.insert(launch.end(), {"--wait-for", "3"});
    start("0.0.0", 0, 2, launch);
    start("0.1.0", 1, 2, launch);
    start("0.2.0", -1, 2, bad);
    const ProcessResult refused = finish("0.2.0");
    EXPECT_EQ(refused.exit_code, 1) << refused.output;
    start("0.2.1", -1, 2, good);
    std::set<std::string> digests;
    for (const char* id : {"0.0.0", "0.1.0", "0.2.1"}) {
      const ProcessResult& r = finish(id);
      EXPECT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
      digests.insert(testing::lastAfter(r.output, "final parameters sha256 "));
    }
    EXPECT_EQ(digests.size(), 1u) << "the replicas differ";
    EXPECT_EQ(digests.begin()->size(), 64u);
    // The survivors re-formed without the refused member, then admitted the good one and healed
    // it: the last membership every member printed has three, and the replacement is healed.
    const std::string& replacement = results_["0.2.1"].output;
    EXPECT_TRUE(std::regex_search(
        replacement,
        std::regex(R"(membership: epoch \d+, rank 2 of 3, step \d+, join, state from 0 to \[2\])")))
        << replacement;
    for (const char* id : {"0.0.0", "0.1.0"}) {
      EXPECT_TRUE(
          std::regex_search(results_[id].output, std::regex(R"(rank \d of 2, step \d+, failure)")))
          << id << ":\n"
          << results_[id].output;
    }
    return refused.output;
  }

  std::unique_ptr<comm::StoreServer> server_;
  std::unique_ptr<comm::StoreClient> store_;
  std::map<std::string, std::thread> workers_;
  std::map<std::string, ProcessResult> results_;
};

TEST_F(ElasticProcessTest, AReplacementFromAnotherConfigurationIsRefusedAndAGoodOneHealed) {
  const std::string out =
      refusedThenHealed({"--config", "lr: 0.05\nwidth: 8"}, {"--config", "lr: 0.5\nwidth: 8"});
  EXPECT_NE(out.find("cumulus-elastic-worker: the state sent by rank 0 was captured under another "
                     "configuration ('lr: 0.05' there, 'lr: 0.5' here): every member must run "
                     "with the same one\n"),
            std::string::npos)
      << out;
}

TEST_F(ElasticProcessTest, AReplacementWhoseTensorsDifferIsRefusedNamingTheTensor) {
  const std::string out =
      refusedThenHealed({"--config", "same"}, {"--config", "same", "--width", "16"});
  EXPECT_NE(out.find("cumulus-elastic-worker: the state sent by rank 0: tensor \"0.weight\": shape "
                     "[8, 4] in the checkpoint, [16, 4] in the module\n"),
            std::string::npos)
      << out;
}

// A notice to one of three members, when one is enough to go on: it leaves at the agreed step
// (exit 75) and the two others train on to the end, identical.
TEST_F(ElasticProcessTest, ANoticedMemberLeavesAndTheOthersTrainOn) {
  start("0.0.0", 0, 3, {"--steps", "40"});
  start("0.1.0", 1, 3, {"--steps", "40"});
  start("0.2.0", 2, 3, {"--steps", "40", "--notice-at", "10"});
  const ProcessResult& left = finish("0.2.0");
  EXPECT_EQ(left.exit_code, 75) << left.output;
  EXPECT_NE(left.output.find("left at step 10\n"), std::string::npos) << left.output;
  std::set<std::string> digests;
  for (const char* id : {"0.0.0", "0.1.0"}) {
    const ProcessResult& r = finish(id);
    EXPECT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
    EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(rank \d of 2, step 10, leave)")))
        << id << ":\n"
        << r.output;
    digests.insert(testing::lastAfter(r.output, "final parameters sha256 "));
  }
  EXPECT_EQ(digests.size(), 1u);
}

// The same with bf16 compression: each stayer's error feedback is its own and survives the
// re-forming (the residual the membership change reports is the one its last step left).
TEST_F(ElasticProcessTest, UnderBf16CompressionTheStayersKeepTheirErrorFeedback) {
  start("0.0.0", 0, 3, {"--steps", "20", "--bf16", "1"});
  start("0.1.0", 1, 3, {"--steps", "20", "--bf16", "1"});
  start("0.2.0", 2, 3, {"--steps", "20", "--bf16", "1", "--notice-at", "10"});
  EXPECT_EQ(finish("0.2.0").exit_code, 75) << results_["0.2.0"].output;
  std::set<std::string> digests;
  for (const char* id : {"0.0.0", "0.1.0"}) {
    const ProcessResult& r = finish(id);
    ASSERT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
    // The line after a marker, from `from` on.
    auto lineAfter = [&r](const std::string& marker, size_t from) {
      const size_t at = r.output.find(marker, from);
      if (at == std::string::npos) return std::string("(none)");
      const size_t begin = at + marker.size();
      return r.output.substr(begin, r.output.find('\n', begin) - begin);
    };
    const std::string before = lineAfter("step 10 residual ", 0);
    const size_t leave = r.output.find(", step 10, leave");
    ASSERT_NE(leave, std::string::npos) << id << ":\n" << r.output;
    const std::string after = lineAfter("membership residual ", leave);
    EXPECT_EQ(before, after) << id << ":\n" << r.output;
    EXPECT_NE(std::stod(before), 0.0) << "bf16 rounding left no residual: the test shows nothing";
    digests.insert(testing::lastAfter(r.output, "final parameters sha256 "));
  }
  EXPECT_EQ(digests.size(), 1u);
}

// A member dies in the boundary's own collective (the loss sum through atBoundary), after the
// step was committed everywhere: the others' sum fails, they re-form without it from that step,
// skip the rest of the boundary and train on to identical replicas.
TEST_F(ElasticProcessTest, ADeathInTheBoundarysOwnCollectiveReformsAndTheLoopGoesOn) {
  start("0.0.0", 0, 3, {"--steps", "20"});
  start("0.1.0", 1, 3, {"--steps", "20"});
  start("0.2.0", 2, 3, {"--steps", "20", "--die-in-boundary", "8"});
  EXPECT_EQ(finish("0.2.0").signal, SIGKILL) << results_["0.2.0"].output;
  std::set<std::string> digests;
  for (const char* id : {"0.0.0", "0.1.0"}) {
    const ProcessResult& r = finish(id);
    EXPECT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
    EXPECT_NE(r.output.find("member " + std::string(id) + ", in place 1\n"), std::string::npos)
        << id << ":\n"
        << r.output;
    EXPECT_NE(r.output.find("failure: "), std::string::npos) << id << ":\n" << r.output;
    EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(rank \d of 2, step 8, failure)")))
        << id << ":\n"
        << r.output;
    EXPECT_NE(r.output.find("boundary of step 8 interrupted\n"), std::string::npos)
        << id << ":\n"
        << r.output;
    digests.insert(testing::lastAfter(r.output, "final parameters sha256 "));
  }
  EXPECT_EQ(digests.size(), 1u);
}

// Deaths before the first step: in start()'s own collectives (--die-at-start 2: connected, then
// gone before start(); 1: in the program's `prepare`). The survivors re-form inside start() as
// the same processes, every member takes one member's state (some may have run the start-up's
// collectives and others not), the loop trains, and a replacement started as cumulus-run would
// is admitted and healed: three identical replicas.
TEST_F(ElasticProcessTest, ADeathDuringStartUpReformsInPlaceAndAReplacementJoins) {
  for (const char* when : {"2", "1"}) {
    SCOPED_TRACE(std::string("--die-at-start ") + when);
    server_ = std::make_unique<comm::StoreServer>("127.0.0.1", 0, kToken);
    store_ = std::make_unique<comm::StoreClient>("127.0.0.1", server_->port(), kToken);
    workers_.clear();
    results_.clear();
    const Args flags = {"--steps", "30", "--wait-for", "3"};
    Args dying = flags;
    dying.insert(dying.end(), {"--die-at-start", when});
    start("0.0.0", 0, 3, flags);
    start("0.1.0", 1, 3, dying);
    start("0.2.0", 2, 3, flags);
    EXPECT_EQ(finish("0.1.0").signal, SIGKILL) << results_["0.1.0"].output;
    start("0.1.1", -1, 3, flags);
    std::set<std::string> digests;
    for (const char* id : {"0.0.0", "0.2.0", "0.1.1"}) {
      const ProcessResult& r = finish(id);
      EXPECT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
      digests.insert(testing::lastAfter(r.output, "final parameters sha256 "));
    }
    EXPECT_EQ(digests.size(), 1u) << "the replicas differ";
    for (const char* id : {"0.0.0", "0.2.0"}) {
      // Re-formed at step 0, every member but the source healed from it (the replacement too,
      // when its ticket was there in time to come in with that re-forming).
      EXPECT_TRUE(std::regex_search(results_[id].output,
                                    std::regex(R"(membership: epoch 1, rank \d of ([23]), step 0, )"
                                               R"(failure, state from 0 to \[1(,2)?\])")))
          << id << ":\n"
          << results_[id].output;
    }
    EXPECT_NE(results_["0.1.1"].output.find("parameters at the end sum to "), std::string::npos)
        << results_["0.1.1"].output;
  }
}

// A death in the run's last boundary (Elastic::atEnd), after every member committed the last step:
// the others' collective fails, they re-form, and the last boundary runs again, whole, on the
// members left (it is never skipped, as a boundary mid-run is), so the run ends.
TEST_F(ElasticProcessTest, ADeathInTheLastBoundaryRunsItAgainAndTheRunEnds) {
  start("0.0.0", 0, 3, {"--steps", "20"});
  start("0.1.0", 1, 3, {"--steps", "20", "--die-at-end", "1"});
  start("0.2.0", 2, 3, {"--steps", "20"});
  EXPECT_EQ(finish("0.1.0").signal, SIGKILL) << results_["0.1.0"].output;
  std::set<std::string> digests;
  for (const char* id : {"0.0.0", "0.2.0"}) {
    const ProcessResult& r = finish(id);
    EXPECT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
    EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(rank \d of 2, step 20, failure)")))
        << id << ":\n"
        << r.output;
    EXPECT_NE(r.output.find(" over 2 members\n"), std::string::npos) << id << ":\n" << r.output;
    digests.insert(testing::lastAfter(r.output, "final parameters sha256 "));
  }
  EXPECT_EQ(digests.size(), 1u);
}

// The same notice when all three are needed (CUMULUS_MIN_WORKERS=3, a fixed-size job): every
// member stops at the agreed step, for a checkpoint and a relaunch.
TEST_F(ElasticProcessTest, ANoticeStopsEveryMemberWhenTooFewWouldStay) {
  start("0.0.0", 0, 3, {"--steps", "40"}, "3");
  start("0.1.0", 1, 3, {"--steps", "40"}, "3");
  start("0.2.0", 2, 3, {"--steps", "40", "--notice-at", "10"}, "3");
  for (const char* id : {"0.0.0", "0.1.0", "0.2.0"}) {
    const ProcessResult& r = finish(id);
    EXPECT_EQ(r.exit_code, 75) << id << ":\n" << r.output;
    EXPECT_NE(r.output.find("stopped at step 10\n"), std::string::npos) << id << ":\n" << r.output;
  }
}

// Without in-place recovery (CUMULUS_RECOVERY=restart) the same program is a plain data-parallel
// group: it trains to the end with identical replicas, and a notice to one member stops both at
// the agreed step (a failure would be the launcher's to restart).
TEST_F(ElasticProcessTest, WithRestartRecoveryTheLoopIsAPlainGroup) {
  start("0.0.0", 0, 2, {"--steps", "20"}, "1", "restart");
  start("0.1.0", 1, 2, {"--steps", "20"}, "1", "restart");
  std::set<std::string> digests;
  for (const char* id : {"0.0.0", "0.1.0"}) {
    const ProcessResult& r = finish(id);
    EXPECT_EQ(r.exit_code, 0) << id << ":\n" << r.output;
    EXPECT_TRUE(std::regex_search(
        r.output, std::regex(R"(membership: epoch 0, rank \d of 2, step 0, start, state from -1)")))
        << r.output;
    digests.insert(testing::lastAfter(r.output, "final parameters sha256 "));
  }
  EXPECT_EQ(digests.size(), 1u);
}

TEST_F(ElasticProcessTest, WithRestartRecoveryANoticeStopsEveryMember) {
  start("0.0.0", 0, 2, {"--steps", "40"}, "1", "restart");
  start("0.1.0", 1, 2, {"--steps", "40", "--notice-at", "10"}, "1", "restart");
  for (const char* id : {"0.0.0", "0.1.0"}) {
    const ProcessResult& r = finish(id);
    EXPECT_EQ(r.exit_code, 75) << id << ":\n" << r.output;
    EXPECT_NE(r.output.find("stopped at step 10\n"), std::string::npos) << id << ":\n" << r.output;
  }
}

}  // namespace
}  // namespace cumulus
