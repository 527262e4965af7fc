// The step loop under a StopAgreement of the test's own (TrainerOptions::stop): the loop stops or
// checkpoints exactly where the agreement says, and a run stopped that way resumes bit-identical.
// Also SigtermAtStep, the recorder wrapper cumulus-train-faults installs for a notice.
#include "cumulus/preemption.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "models/model.h"
#include "tests/trainer/fault_parts.h"
#include "trainer/trainer.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;

// Answers `action` after step `at` and kContinue elsewhere; counts the calls.
class ScriptedAgreement final : public StopAgreement {
 public:
  ScriptedAgreement(int64_t at, StepAction action) : at_(at), action_(action) {}
  void start() override { ++starts; }
  StepAction decide(int64_t steps_done) override {
    decided.push_back(steps_done);
    return steps_done == at_ ? action_ : StepAction::kContinue;
  }
  void waitForAll() override { ++waits; }

  int starts = 0;
  int waits = 0;
  std::vector<int64_t> decided;

 private:
  int64_t at_;
  StepAction action_;
};

// 512 synthetic samples, global batch 64: 8 steps an epoch, 2 epochs; no scheduled checkpoints.
configs::Experiment experiment(const fs::path& run_dir) {
  configs::Experiment e;
  e.name = "stop_agreement_test";
  e.model.name = "mlp";
  e.model.hidden = {16};
  e.model.dropout = 0.2;
  e.data.dataset = configs::Dataset::kSynthetic;
  e.data.synthetic_train_samples = 512;
  e.data.synthetic_test_samples = 128;
  e.optimizer.lr = 0.05;
  e.trainer.global_batch_size = 64;
  e.trainer.epochs = 2;
  e.trainer.threads = 1;
  e.trainer.run_dir = run_dir.string();
  return e;
}

std::vector<std::string> checkpointsIn(const fs::path& run_dir) {
  std::vector<std::string> names;
  if (!fs::exists(run_dir / "checkpoints")) return names;
  for (const auto& entry : fs::directory_iterator(run_dir / "checkpoints")) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class StopAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("stop_agreement_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(StopAgreementTest, TheLoopStopsWhereTheAgreementSaysWithThatStepCheckpointed) {
  const auto agreement = std::make_shared<ScriptedAgreement>(5, StepAction::kStop);
  TrainerOptions options;
  options.stop = usePart<StopAgreement>(agreement);
  Trainer stopped(experiment(dir_ / "x"), RunEnv{}, options);
  const RunResult first = stopped.run();

  EXPECT_TRUE(first.preempted);
  EXPECT_EQ(first.steps, 5);
  EXPECT_EQ(first.step_losses.size(), 5u);
  EXPECT_EQ(first.checkpoint, (dir_ / "x" / "checkpoints" / "step-00000005").string());
  EXPECT_EQ(checkpointsIn(dir_ / "x"), std::vector<std::string>{"step-00000005"});
  EXPECT_EQ(agreement->starts, 1);
  EXPECT_EQ(agreement->decided, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(agreement->waits, 1);

  // Resumed from that checkpoint, the run ends where one that never stopped does.
  TrainerOptions resume;
  resume.resume = ResumeMode::parse("auto");
  Trainer resumed(experiment(dir_ / "x"), RunEnv{}, resume);
  const RunResult second = resumed.run();
  EXPECT_EQ(second.first_step, 5);
  EXPECT_FALSE(second.preempted);
  Trainer whole(experiment(dir_ / "whole"), RunEnv{}, TrainerOptions{});
  whole.run();
  EXPECT_EQ(parameterDigest(resumed.model()), parameterDigest(whole.model()));
}

TEST_F(StopAgreementTest, AnAgreedCheckpointIsWrittenAndTrainingGoesOn) {
  const auto agreement = std::make_shared<ScriptedAgreement>(3, StepAction::kCheckpoint);
  std::ostringstream console;
  TrainerOptions options;
  options.console = &console;
  options.stop = usePart<StopAgreement>(agreement);
  Trainer trainer(experiment(dir_ / "x"), RunEnv{}, options);
  const RunResult result = trainer.run();

  EXPECT_FALSE(result.preempted);
  EXPECT_EQ(result.steps, 16);
  EXPECT_EQ(checkpointsIn(dir_ / "x"), std::vector<std::string>{"step-00000003"});
  // Every boundary but the last is agreed on.
  EXPECT_EQ(agreement->decided.size(), 15u);
  EXPECT_EQ(agreement->waits, 0);
  EXPECT_NE(console.str().find("checkpoint requested at step 3; training goes on\n"),
            std::string::npos)
      << console.str();
}

TEST_F(StopAgreementTest, ASigtermRaisedAtAStepsRecordStopsAtThatStep) {
  resetSigtermForTesting();
  installSigtermHandler();
  TrainerOptions options;
  options.watch_sigterm = true;
  options.preemption_grace = 0;  // no watchdog in the test process
  options.metrics = [](std::shared_ptr<metrics::MetricsRecorder> standard) {
    return std::make_shared<SigtermAtStep>(std::move(standard), 7);
  };
  Trainer trainer(experiment(dir_ / "x"), RunEnv{}, options);
  const RunResult result = trainer.run();
  EXPECT_TRUE(sigtermReceived());
  resetSigtermForTesting();
  signal(SIGTERM, SIG_DFL);
  EXPECT_TRUE(result.preempted);
  EXPECT_EQ(result.steps, 7);
  EXPECT_EQ(checkpointsIn(dir_ / "x"), std::vector<std::string>{"step-00000007"});
}

TEST_F(StopAgreementTest, AChoiceThatReturnsNoPartIsASetupError) {
  TrainerOptions options;
  options.stop = [](std::shared_ptr<StopAgreement>) { return nullptr; };
  try {
    Trainer trainer(experiment(dir_ / "x"), RunEnv{}, options);
    FAIL() << "no SetupError";
  } catch (const SetupError& e) {
    EXPECT_STREQ(
        e.what(),
        "TrainerOptions::stop returned no part; return the default it is given to keep it");
  }
}

}  // namespace
}  // namespace cumulus::trainer
