// planResume (what a resume keeps, refuses, re-shards) and the sample ledger.
#include "trainer/resume.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>

#include "checkpoint/checkpoint_snapshot.h"
#include "checkpoint/checkpoint_state_proto.h"
#include "configs/parse.h"
#include "cumulus/sampler.h"
#include "tests/test_support.h"

namespace cumulus::trainer {
namespace {

using cumulus::testing::errorOf;

CheckpointState stateFor(const configs::Experiment& e, uint64_t step, uint64_t epoch,
                         uint64_t cursor, uint32_t world) {
  CheckpointState state;
  state.format_version = kResumableFormatVersion;
  state.config_yaml = configs::toYaml(e);
  state.step = step;
  state.epoch = epoch;
  state.sampler_cursor = cursor;
  state.world_size = world;
  state.samples_seen = step * e.trainer.global_batch_size;
  return state;
}

TEST(ResumeTest, FormatVersionMatchesTheWriter) {
  EXPECT_EQ(kResumableFormatVersion, checkpoint::kCheckpointFormatVersion);
}

TEST(ResumeTest, ModeFromFlag) {
  EXPECT_EQ(ResumeMode::parse("auto").kind, ResumeMode::Kind::kAuto);
  EXPECT_EQ(ResumeMode::parse("none").kind, ResumeMode::Kind::kNone);
  EXPECT_EQ(ResumeMode::parse("").kind, ResumeMode::Kind::kNone);
  const ResumeMode path = ResumeMode::parse("runs/x/checkpoints/step-00000040");
  EXPECT_EQ(path.kind, ResumeMode::Kind::kPath);
  EXPECT_EQ(path.path, "runs/x/checkpoints/step-00000040");
  EXPECT_EQ(ResumeMode::defaultFor(true).kind, ResumeMode::Kind::kAuto);
  EXPECT_EQ(ResumeMode::defaultFor(false).kind, ResumeMode::Kind::kNone);
}

TEST(ResumeTest, SameConfigAndWorldRestoresPosition) {
  configs::Experiment e;
  e.trainer.global_batch_size = 64;
  const ResumePlan plan = planResume(e, 2, stateFor(e, 40, 1, 640, 2), "/c/step-00000040", false);
  EXPECT_EQ(plan.step, 40);
  EXPECT_EQ(plan.sampler, (cumulus::SamplerState{1, 640}));
  EXPECT_EQ(plan.samples_seen, 40u * 64u);
  EXPECT_FALSE(plan.world_size_changed);
  EXPECT_TRUE(plan.config_changes.empty());
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_EQ(plan.notes[0],
            "resuming from /c/step-00000040 at step 40 (epoch 1, sample 640 of the epoch)");
}

// The shares of the global batch in force replay on the writer's world size; another world size,
// another global batch, or a checkpoint written before shares existed start with equal ones.
TEST(ResumeTest, SharesReplayOnlyWhereTheyFit) {
  configs::Experiment e;
  e.trainer.global_batch_size = 64;
  CheckpointState state = stateFor(e, 40, 1, 640, 2);
  EXPECT_TRUE(planResume(e, 2, state, "/c", false).batch_shares.empty());  // an older checkpoint
  state.batch_shares = {44, 20};
  EXPECT_EQ(planResume(e, 2, state, "/c", false).batch_shares, (std::vector<int64_t>{44, 20}));
  EXPECT_TRUE(planResume(e, 3, state, "/c", false).batch_shares.empty());
  configs::Experiment bigger = e;
  bigger.trainer.global_batch_size = 128;
  state.sampler_cursor = 0;
  EXPECT_TRUE(planResume(bigger, 2, state, "/c", true).batch_shares.empty());
}

TEST(ResumeTest, SharesRoundTripThroughStatePb) {
  CheckpointState state;
  state.batch_shares = {44, 20};
  const proto::CheckpointState wire = checkpoint::stateToProto(state);
  ASSERT_EQ(wire.batch_shares_size(), 2);
  EXPECT_EQ(checkpoint::stateFromProto(wire).batch_shares, (std::vector<int64_t>{44, 20}));
  EXPECT_TRUE(checkpoint::stateFromProto(proto::CheckpointState()).batch_shares.empty());
}

TEST(ResumeTest, OtherWorldSizeKeepsTheGlobalCursor) {
  configs::Experiment e;
  e.trainer.global_batch_size = 64;
  const ResumePlan plan = planResume(e, 1, stateFor(e, 12, 0, 768, 2), "/c/step-00000012", false);
  EXPECT_TRUE(plan.world_size_changed);
  EXPECT_EQ(plan.saved_world_size, 2u);
  EXPECT_EQ(plan.sampler, (cumulus::SamplerState{0, 768}));
  ASSERT_EQ(plan.notes.size(), 3u);
  EXPECT_EQ(plan.notes[1],
            "world size 2 -> 1: re-sharding each global batch of 64 from the "
            "global cursor");
  // One worker now carries the 64 samples two carried: two micro-batches of 32, as before.
  EXPECT_EQ(plan.grad_accumulation, 2);
  EXPECT_EQ(plan.notes[2],
            "trainer.grad_accumulation 1 -> 2 on 1 worker(s), so no micro-batch outgrows the 32 "
            "samples of the run that wrote it");
}

// Fewer workers: accumulation keeps each micro-batch at most the writer's largest; more workers
// or the same number: the config's accumulation. The writer's own accumulation counts (a chain
// 4 -> 2 -> 1 keeps 32-sample micro-batches), and so does an uneven split.
TEST(ResumeTest, AccumulationKeepsMicroBatchesFromGrowing) {
  configs::Experiment e;
  e.trainer.global_batch_size = 128;
  auto plan = [&](int64_t world, uint32_t saved_world, uint32_t saved_k) {
    CheckpointState state = stateFor(e, 10, 0, 10 * e.trainer.global_batch_size, saved_world);
    state.grad_accumulation = saved_k;
    return planResume(e, world, state, "/c/step-00000010", false).grad_accumulation;
  };
  EXPECT_EQ(plan(2, 4, 1), 2);  // 4 x 32 -> 2 x (2 x 32)
  EXPECT_EQ(plan(1, 4, 1), 4);
  EXPECT_EQ(plan(1, 2, 2), 4);  // the writer already ran 2 workers x 2 micro-batches of 32
  EXPECT_EQ(plan(4, 1, 4), 1);  // growing: the config's 1, micro-batches shrink to 32
  EXPECT_EQ(plan(2, 2, 3), 1);  // same world: the config's, whatever the writer ran
  EXPECT_EQ(plan(2, 3, 1), 2);  // 3 workers: micro-batches up to 43; 2 x 64 -> 2 x 2 x 32
  EXPECT_EQ(plan(1, 2, 0), 2);  // written before the field: the saved config's value (1)
  e.trainer.grad_accumulation = 2;
  EXPECT_EQ(plan(1, 2, 0), 4);  // the saved config's 2 at 2 workers: micro-batches of 32
  // Only divisors of the global batch: 5 workers of 96 ran micro-batches up to 20; one worker
  // needs 5 of them, which does not divide 96, so 6 of 16.
  e.trainer.grad_accumulation = 1;
  e.trainer.global_batch_size = 96;
  EXPECT_EQ(plan(1, 5, 1), 6);
  // And never more micro-batches than a rank has samples: 6 workers of 6 ran micro-batches of
  // 1; 4 workers get 1 or 2 samples each, so one micro-batch.
  e.trainer.global_batch_size = 6;
  EXPECT_EQ(plan(4, 6, 1), 1);
}

// Found by tests/fuzz/checkpoint_state_fuzz.cc: world_size and grad_accumulation of state.pb
// are 32-bit each, and their product overflowed int64 (undefined; in practice it wrapped to a
// negative divisor, then divided by zero). One worker resuming such a run gets micro-batches of
// one sample.
TEST(ResumeTest, AHugeSavedWorldAndAccumulationPlanMicroBatchesOfOne) {
  configs::Experiment e;
  e.trainer.global_batch_size = 128;
  CheckpointState state = stateFor(e, 10, 0, 10 * 128, 0xffffffffu);
  state.grad_accumulation = 0xffffffffu;
  EXPECT_EQ(planResume(e, 1, state, "/c/step-00000010", false).grad_accumulation, 128);
}

// ceil(batch / the writer's world) was (batch + world - 1) / world, and the micro-batch bound
// multiplied this world by the writer's largest micro-batch: both past int64 for a global batch
// near 2^63 - 1 = 7^2 x 73 x 127 x 337 x 92737 x 649657. One worker after two needs at least 2
// micro-batches of the writer's 2^62, and 7 is the first divisor of the batch from 2 on. The
// schema caps a batch it reads at 10^9, the checkpoint's recorded config included; a config built
// in code is not read through it, and --allow-config-change takes it over the checkpoint's.
TEST(ResumeTest, AGlobalBatchNearInt64PlansWithoutOverflow) {
  configs::Experiment saved;
  saved.trainer.global_batch_size = 64;
  configs::Experiment e = saved;
  e.trainer.global_batch_size = std::numeric_limits<int64_t>::max();
  const CheckpointState state = stateFor(saved, 10, 0, 0, 2);
  EXPECT_EQ(planResume(e, 1, state, "/c/step-00000010", true).grad_accumulation, 7);
}

// A prime global batch has no divisor between 1 and itself: one worker after two runs
// micro-batches of one sample. The divisors are found in pairs, in 2^16 tries rather than one by
// one up to the batch (2^31 tries, seconds). Built in code, as above.
TEST(ResumeTest, APrimeGlobalBatchPlansMicroBatchesOfOne) {
  configs::Experiment saved;
  saved.trainer.global_batch_size = 64;
  const CheckpointState state = stateFor(saved, 10, 0, 0, 2);
  configs::Experiment e = saved;
  e.trainer.global_batch_size = 2147483647;  // 2^31 - 1, a prime
  EXPECT_EQ(planResume(e, 1, state, "/c/step-00000010", true).grad_accumulation, 2147483647);
  e.trainer.global_batch_size = 2147483646;  // 2 x 3^2 x 7 x 11 x 31 x 151 x 331
  EXPECT_EQ(planResume(e, 1, state, "/c/step-00000010", true).grad_accumulation, 2);
}

// A checkpoint whose recorded config holds a size past the schema's cap (a crafted or corrupt
// state.pb) is refused before anything is planned from it, naming the key and the range.
TEST(ResumeTest, ARecordedSizePastTheSchemasCapIsRefused) {
  configs::Experiment e;
  e.trainer.global_batch_size = std::numeric_limits<int64_t>::max();
  const std::string error =
      errorOf([&] { planResume(e, 1, stateFor(e, 10, 0, 0, 2), "/c/step-00000010", true); });
  const std::string start =
      "checkpoint /c/step-00000010: its recorded config does not parse (/c/step-00000010/state.pb "
      "config:";
  const std::string end =
      ": trainer.global_batch_size: expected an integer in [1, 1000000000], got "
      "9223372036854775807); use --resume none to start over";
  EXPECT_EQ(error.rfind(start, 0), 0u) << error;
  ASSERT_GE(error.size(), end.size()) << error;
  EXPECT_EQ(error.substr(error.size() - end.size()), end) << error;
}

// Found by tests/fuzz/checkpoint_state_fuzz.cc: batch_shares come from the file, and summing them
// overflowed int64 (undefined behaviour). Shares past int64, or a negative one (which could make
// the sum come out right), are refused by name, whatever the world size.
TEST(ResumeTest, CorruptBatchSharesAreRefused) {
  configs::Experiment e;
  e.trainer.global_batch_size = 64;
  CheckpointState state = stateFor(e, 40, 1, 640, 2);
  state.batch_shares = {557055, std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(errorOf([&] { planResume(e, 2, state, "/c/step-00000040", false); }),
            "checkpoint /c/step-00000040: state.pb batch_shares[1] 9223372036854775807 takes the "
            "shares' sum past 2^63 - 1; the file is corrupt: use --resume none to start over");
  state.batch_shares = {-1, 65};
  EXPECT_EQ(errorOf([&] { planResume(e, 2, state, "/c/step-00000040", false); }),
            "checkpoint /c/step-00000040: state.pb batch_shares[0] -1 is negative; the file is "
            "corrupt: use --resume none to start over");
  EXPECT_EQ(errorOf([&] { planResume(e, 3, state, "/c/step-00000040", false); }),
            "checkpoint /c/step-00000040: state.pb batch_shares[0] -1 is negative; the file is "
            "corrupt: use --resume none to start over");
}

// The trainer counts in int64: a step, epoch or cursor of state.pb past 2^63 - 1 would come out
// negative (a cursor of 2^64 - 64 even passed as a multiple of the batch, -64).
TEST(ResumeTest, PositionsPastInt64AreRefused) {
  configs::Experiment e;
  e.trainer.global_batch_size = 64;
  const std::string message =
      " is past the largest the trainer counts to (2^63 - 1); the file is "
      "corrupt: use --resume none to start over";
  CheckpointState state = stateFor(e, 40, 1, 640, 2);
  state.step = uint64_t{1} << 63;
  EXPECT_EQ(errorOf([&] { planResume(e, 2, state, "/c/s", false); }),
            "checkpoint /c/s: state.pb step 9223372036854775808" + message);
  state = stateFor(e, 40, 1, 640, 2);
  state.epoch = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(errorOf([&] { planResume(e, 2, state, "/c/s", false); }),
            "checkpoint /c/s: state.pb epoch 18446744073709551615" + message);
  state = stateFor(e, 40, 1, 0 - uint64_t{64}, 2);
  EXPECT_EQ(errorOf([&] { planResume(e, 2, state, "/c/s", false); }),
            "checkpoint /c/s: state.pb sampler_cursor 18446744073709551552" + message);
  state.sampler_cursor = uint64_t{std::numeric_limits<int64_t>::max()} / 64 * 64;
  EXPECT_EQ(planResume(e, 2, state, "/c/s", false).sampler.cursor,
            std::numeric_limits<int64_t>::max() / 64 * 64);
}

TEST(ResumeTest, ConfigChangeIsRefusedNamingEveryKey) {
  configs::Experiment saved;
  configs::Experiment now = saved;
  now.optimizer.lr = 0.05;
  now.trainer.seed = 7;
  now.trainer.log_every_steps = 3;  // operational: not listed as a reason
  const std::string error = errorOf(
      [&] { planResume(now, 1, stateFor(saved, 5, 0, 640, 1), "/c/step-00000005", false); });
  EXPECT_EQ(error,
            "checkpoint /c/step-00000005: the experiment differs from the one that wrote it in 2 "
            "keys:\n  optimizer.lr: 0.1 -> 0.05\n  trainer.seed: 0 -> 7\nrerun with "
            "--allow-config-change to continue with the new values; or start over in this "
            "directory with --overwrite (which removes its checkpoints), or give the run another "
            "trainer.run_dir");
}

TEST(ResumeTest, OtherExperimentChangesListOnlyWhatChangesTheRun) {
  configs::Experiment saved;
  configs::Experiment now = saved;
  now.trainer.log_every_steps = 3;  // operational: the same experiment
  EXPECT_TRUE(otherExperimentChanges(now, stateFor(saved, 5, 0, 640, 1)).empty());
  now.optimizer.lr = 0.05;
  EXPECT_EQ(otherExperimentChanges(now, stateFor(saved, 5, 0, 640, 1)),
            std::vector<std::string>{"optimizer.lr: 0.1 -> 0.05"});
  CheckpointState garbled = stateFor(saved, 5, 0, 640, 1);
  garbled.config_yaml = "model: [";
  const std::vector<std::string> changes = otherExperimentChanges(now, garbled);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rfind("its recorded config does not parse (", 0), 0u) << changes[0];
}

TEST(ResumeTest, ConfigChangeAcceptedWhenAllowed) {
  configs::Experiment saved;
  configs::Experiment now = saved;
  now.optimizer.lr = 0.05;
  const ResumePlan plan =
      planResume(now, 1, stateFor(saved, 5, 0, 640, 1), "/c/step-00000005", true);
  EXPECT_EQ(plan.config_changes, std::vector<std::string>{"optimizer.lr: 0.1 -> 0.05"});
  EXPECT_EQ(plan.notes.back(), "config: optimizer.lr: 0.1 -> 0.05");
}

TEST(ResumeTest, OperationalChangesNeedNoFlag) {
  configs::Experiment saved;
  configs::Experiment now = saved;
  now.trainer.run_dir = "runs/elsewhere";
  now.checkpoint.every_steps = 10;
  now.comm.algorithm = Algorithm::kRing;
  now.launch.nproc_per_node = 4;
  now.trainer.threads = 2;
  EXPECT_TRUE(semanticDiffKeys(saved, now).empty());
  const ResumePlan plan =
      planResume(now, 1, stateFor(saved, 5, 0, 640, 1), "/c/step-00000005", false);
  EXPECT_EQ(plan.config_changes.size(), 5u);
}

TEST(ResumeTest, ModelOrOptimizerChangeIsRefusedEvenWhenAllowed) {
  configs::Experiment saved;
  configs::Experiment now = saved;
  now.model.name = "convnet";
  EXPECT_EQ(
      errorOf([&] { planResume(now, 1, stateFor(saved, 5, 0, 0, 1), "/c/step-00000005", true); }),
      "checkpoint /c/step-00000005: it holds a 'mlp' model, not 'convnet'; start over in this "
      "directory with --overwrite (which removes its checkpoints), or give the run another "
      "trainer.run_dir");
  now = saved;
  now.optimizer.name = configs::OptimizerName::kAdamw;
  EXPECT_EQ(
      errorOf([&] { planResume(now, 1, stateFor(saved, 5, 0, 0, 1), "/c/step-00000005", true); }),
      "checkpoint /c/step-00000005: it holds 'sgd' optimizer state, not 'adamw'; start over in "
      "this directory with --overwrite (which removes its checkpoints), or give the run another "
      "trainer.run_dir");
}

TEST(ResumeTest, BadStateIsRefused) {
  configs::Experiment e;
  CheckpointState state = stateFor(e, 5, 0, 640, 1);
  state.format_version = 9;
  EXPECT_EQ(errorOf([&] { planResume(e, 1, state, "/c/s", false); }),
            "checkpoint /c/s: format version 9 is not the supported 1; resume it with the "
            "Cumulus version that wrote it, or use --resume none");
  state = stateFor(e, 5, 0, 100, 1);
  EXPECT_EQ(errorOf([&] { planResume(e, 1, state, "/c/s", false); }),
            "checkpoint /c/s: sampler cursor 100 is not a multiple of trainer.global_batch_size "
            "128; resume with the global batch it was written with");
  state = stateFor(e, 5, 0, 0, 1);
  state.config_yaml = "trainer: [";
  EXPECT_NE(errorOf([&] {
              planResume(e, 1, state, "/c/s", false);
            }).find("checkpoint /c/s: its recorded config does not parse"),
            std::string::npos);
}

// Ledger of a world-size change 2 -> 1 mid-epoch, driven by the real sampler: after dropping the
// steps the first launch lost, every sample of the epoch was consumed exactly once.
TEST(SampleLedgerTest, ReshardedRunConsumesEverySampleOnce) {
  const int64_t n = 100, batch = 8;
  std::set<int64_t> expected;
  {
    cumulus::DistributedSampler full(n, batch, 3, true, true);
    for (int64_t k = 0; k < full.stepsPerEpoch(); ++k, full.advance()) {
      for (int64_t i : full.globalBatch()) expected.insert(i);
    }
  }
  ASSERT_EQ(expected.size(), 96u);  // drop_last: 12 batches of 8

  cumulus::DistributedSampler sampler(n, batch, 3, true, true);
  SampleLedger ledger;
  cumulus::SamplerState checkpoint;
  for (int64_t step = 0; step < 7; ++step) {  // launch 1, world 2; checkpoint after step 4
    for (int64_t r = 0; r < 2; ++r) ledger.record(1, 0, step, r, sampler.localIndices(r, 2));
    sampler.advance();
    if (step == 4) checkpoint = sampler.state();
  }
  cumulus::DistributedSampler resumed(n, batch, 3, true, true);
  resumed.restore(checkpoint);
  for (int64_t step = 5; resumed.state().epoch == 0; ++step) {  // launch 2, world 1
    ledger.record(2, 0, step, 0, resumed.localIndices(0, 1));
    resumed.advance();
  }
  const auto doubled = ledger.checkEpoch(0, expected);
  EXPECT_EQ(doubled.size(), 16u);  // the 2 lost steps' 16 samples
  EXPECT_NE(doubled[0].find(" consumed 2 times (step "), std::string::npos) << doubled[0];
  ledger.dropReplayedSteps();
  EXPECT_EQ(ledger.checkEpoch(0, expected), std::vector<std::string>{});
  EXPECT_EQ(ledger.records(), 10u + 7u);
}

TEST(SampleLedgerTest, FileRoundTripAndProblems) {
  char path[] = "/tmp/cumulus_ledger_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream out(path);
    out << ledgerLine(7, 0, 0, 0, {3, 1}) << ledgerLine(7, 0, 0, 1, {2})
        << ledgerLine(7, 1, 1, 0, {});
  }
  SampleLedger ledger;
  ledger.readFile(path);
  EXPECT_EQ(ledger.records(), 3u);
  EXPECT_EQ(ledger.epochs(), (std::set<int64_t>{0, 1}));
  EXPECT_TRUE(ledger.checkEpoch(0, {1, 2, 3}).empty());
  EXPECT_EQ(ledger.checkEpoch(0, {1, 2, 3, 4}),
            std::vector<std::string>{"epoch 0: sample 4 never consumed"});
  EXPECT_EQ(ledger.checkEpoch(0, {1, 2}),
            std::vector<std::string>{"epoch 0: sample 3 is not in the epoch (step 0 rank 0)"});
  ledger.record(7, 0, 1, 0, {2});
  EXPECT_EQ(ledger.checkEpoch(0, {1, 2, 3}),
            std::vector<std::string>{"epoch 0: sample 2 consumed 2 times (step 0 rank 1, step 1 "
                                     "rank 0)"});
  {
    std::ofstream out(path, std::ios::app);
    out << "7 0 x 1 2\n";
  }
  EXPECT_EQ(
      errorOf([&] { ledger.readFile(path); }),
      std::string(path) + ":4: not a ledger line \"LAUNCH EPOCH STEP RANK i,j,...\": 7 0 x 1 2");
  std::remove(path);
}

}  // namespace
}  // namespace cumulus::trainer
