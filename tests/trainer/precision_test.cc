// trainer.precision end to end: a bf16 run trains to a loss close to fp32's with float32 masters,
// repeats and resumes bit-identically, resumes a checkpoint written in the other precision, and
// auto decides from the CPU the trainer is given.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "models/model.h"
#include "tests/test_dir.h"
#include "trainer/trainer.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;

// 512 synthetic samples, global batch 64: 8 steps per epoch, 16 in all.
configs::Experiment smallExperiment(const std::string& run_dir, Precision precision) {
  configs::Experiment e;
  e.name = "precision_test";
  e.model.name = "mlp";
  e.model.hidden = {64};
  e.data.dataset = configs::Dataset::kSynthetic;
  e.data.synthetic_train_samples = 512;
  e.data.synthetic_test_samples = 256;
  e.optimizer.name = configs::OptimizerName::kAdamw;
  e.optimizer.lr = 0.01;
  e.trainer.global_batch_size = 64;
  e.trainer.epochs = 2;
  e.trainer.seed = 5;
  e.trainer.threads = 1;
  e.trainer.precision = precision;
  e.trainer.run_dir = run_dir;
  e.trainer.log_every_steps = 4;
  return e;
}

CpuFeatures nativeBf16() {
  CpuFeatures cpu;
  cpu.avx512_bf16 = true;
  return cpu;
}

struct Outcome {
  RunResult result;
  std::string console;
};

Outcome train(const configs::Experiment& e, const std::string& resume = "none",
              const CpuFeatures& cpu = nativeBf16()) {
  std::ostringstream console;
  TrainerOptions options;
  options.console = &console;
  options.resume = ResumeMode::parse(resume);
  options.cpu = cpu;
  options.step_watchdog = false;
  options.write_outputs = !e.trainer.run_dir.empty();
  Trainer trainer(e, RunEnv{}, options);
  Outcome run{trainer.run(), ""};
  run.console = console.str();
  // The masters stay float32 whatever the precision.
  for (const auto& [name, p] : trainer.model().namedParameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat32) << name;
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32) << name;
  }
  return run;
}

TEST(PrecisionTraining, Bf16TrainsCloseToFp32AndRepeatsBitIdentically) {
  const fs::path dir = testing::freshTestDir("precision");
  const Outcome fp32 = train(smallExperiment((dir / "fp32").string(), Precision::kFp32));
  const Outcome bf16 = train(smallExperiment((dir / "bf16").string(), Precision::kBf16));
  const Outcome again = train(smallExperiment((dir / "again").string(), Precision::kBf16));
  EXPECT_EQ(fp32.result.precision, Precision::kFp32);
  EXPECT_EQ(bf16.result.precision, Precision::kBf16);

  ASSERT_EQ(bf16.result.step_losses.size(), 16u);
  EXPECT_NE(bf16.result.step_losses, fp32.result.step_losses);  // bf16 really ran
  EXPECT_LT(bf16.result.step_losses.back(), 0.5 * bf16.result.step_losses.front());
  EXPECT_NEAR(bf16.result.test_loss, fp32.result.test_loss, 0.05 * fp32.result.test_loss + 0.01);
  ASSERT_TRUE(bf16.result.test_accuracy && fp32.result.test_accuracy);
  EXPECT_NEAR(*bf16.result.test_accuracy, *fp32.result.test_accuracy, 0.02);

  EXPECT_EQ(again.result.step_losses, bf16.result.step_losses);
  EXPECT_EQ(again.result.parameter_digest, bf16.result.parameter_digest);
  EXPECT_NE(bf16.result.parameter_digest, fp32.result.parameter_digest);

  EXPECT_NE(bf16.console.find("precision: bf16 (as asked; bf16 autocast, float32 weights and "
                              "optimizer)\n"),
            std::string::npos)
      << bf16.console;
  // metrics.jsonl's first record says the same.
  std::ifstream metrics(dir / "bf16" / "metrics.jsonl");
  std::string first;
  std::getline(metrics, first);
  EXPECT_EQ(first.rfind("{\"type\":\"precision\",\"precision\":\"bf16\",\"requested\":\"bf16\","
                        "\"reason\":\"as asked; bf16 autocast, float32 weights and optimizer\"",
                        0),
            0u)
      << first;
}

// An uninterrupted run of `e` with checkpoints at steps 6, 12 and 16, after which only step 6's is
// left: the next launch with resume auto starts from there.
Outcome trainAndKeepStepSix(configs::Experiment& e) {
  e.checkpoint.every_steps = 6;
  e.checkpoint.keep = 5;
  e.checkpoint.async = false;
  Outcome whole = train(e);
  const fs::path checkpoints = fs::path(e.trainer.run_dir) / "checkpoints";
  EXPECT_TRUE(fs::exists(checkpoints / "step-00000006"));
  fs::remove_all(checkpoints / "step-00000012");
  fs::remove_all(checkpoints / "step-00000016");
  return whole;
}

// The resume from step 6 must end where the uninterrupted run ended, bit for bit.
TEST(PrecisionTraining, AResumeInBf16IsBitIdentical) {
  const fs::path dir = testing::freshTestDir("precision");
  auto e = smallExperiment((dir / "run").string(), Precision::kBf16);
  const Outcome whole = trainAndKeepStepSix(e);
  const Outcome resumed = train(e, "auto");
  EXPECT_EQ(resumed.result.first_step, 6);
  ASSERT_EQ(resumed.result.step_losses.size(), 10u);
  EXPECT_EQ(resumed.result.step_losses, std::vector<double>(whole.result.step_losses.begin() + 6,
                                                            whole.result.step_losses.end()));
  EXPECT_EQ(resumed.result.parameter_digest, whole.result.parameter_digest);
  EXPECT_EQ(resumed.console.find("was written in"), std::string::npos) << resumed.console;
}

TEST(PrecisionTraining, ACheckpointResumesInTheOtherPrecisionAndSaysSo) {
  const fs::path dir = testing::freshTestDir("precision");
  auto e = smallExperiment((dir / "run").string(), Precision::kFp32);
  trainAndKeepStepSix(e);
  e.trainer.precision = Precision::kBf16;  // no --allow-config-change needed
  const Outcome resumed = train(e, "auto");
  EXPECT_EQ(resumed.result.first_step, 6);
  EXPECT_EQ(resumed.result.precision, Precision::kBf16);
  EXPECT_NE(resumed.console.find("config: trainer.precision: fp32 -> bf16\n"), std::string::npos)
      << resumed.console;
  EXPECT_NE(resumed.console.find("the checkpoint was written in fp32 and training goes on in bf16 "
                                 "(its weights and optimizer state are float32 in both)\n"),
            std::string::npos)
      << resumed.console;
}

TEST(PrecisionTraining, AutoDecidesFromTheCpuBothWays) {
  const fs::path dir = testing::freshTestDir("precision");
  auto e = smallExperiment("", Precision::kAuto);
  e.trainer.max_steps = 2;
  const Outcome with = train(e, "none", nativeBf16());
  EXPECT_EQ(with.result.precision, Precision::kBf16);
  EXPECT_NE(with.console.find("precision: bf16 (auto: this CPU has native bf16 (avx512_bf16))\n"),
            std::string::npos)
      << with.console;
  const Outcome without = train(e, "none", CpuFeatures{});
  EXPECT_EQ(without.result.precision, Precision::kFp32);
  EXPECT_NE(without.console.find(
                "precision: fp32 (auto: this CPU has no native bf16 (no avx512_bf16 or AMX))\n"),
            std::string::npos)
      << without.console;
  EXPECT_EQ(without.console.find("warning"), std::string::npos) << without.console;
}

TEST(PrecisionTraining, Bf16WithoutNativeSupportRunsWithOneWarning) {
  auto e = smallExperiment("", Precision::kBf16);
  e.trainer.max_steps = 2;
  const Outcome run = train(e, "none", CpuFeatures{});
  EXPECT_EQ(run.result.precision, Precision::kBf16);
  const std::string warning =
      "warning: precision bf16 on a CPU without native bf16 (no avx512_bf16 or AMX): LibTorch "
      "emulates it, which is slower than fp32; use precision auto to train in bf16 only where "
      "the CPU has it\n";
  const size_t at = run.console.find(warning);
  ASSERT_NE(at, std::string::npos) << run.console;
  EXPECT_EQ(run.console.find(warning, at + 1), std::string::npos) << run.console;
}

}  // namespace
}  // namespace cumulus::trainer
