// CheckpointManager: round trip, the commit protocol under crashes and faults, verification
// before deserialization, retention, background saves, and Python's torch.load.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manifest.h"
#include "models/model.h"
#include "tests/checkpoint/file_system_fault.h"
#include "tests/test_support.h"
#include "tests/wait_until.h"
#include "trainer/optimizer.h"
#include "trainer/resume.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

using std::chrono::milliseconds;

using cumulus::testing::errorOf;
using cumulus::testing::TempDir;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A small model-like snapshot with float and integer tensors, values fixed by `seed`.
checkpoint::CheckpointSnapshot makeSnapshot(uint64_t step, int seed = 1) {
  torch::manual_seed(seed);
  checkpoint::CheckpointSnapshot s;
  s.model = {{"conv1.weight", torch::randn({4, 1, 3, 3})},
             {"conv1.bias", torch::randn({4})},
             {"fc.weight", torch::randn({10, 16})},
             {"bn.num_batches_tracked", torch::tensor(static_cast<int64_t>(step))}};
  s.optimizer_tensors = {{"conv1.weight.momentum_buffer", torch::randn({4, 1, 3, 3})},
                         {"fc.weight.momentum_buffer", torch::randn({10, 16})}};
  s.optimizer_scalars = {{"name", std::string("sgd")}, {"step", int64_t(step)}, {"lr", 0.05}};
  s.state.set_step(step);
  s.state.set_epoch(3);
  s.state.set_sampler_cursor(step * 64);
  s.state.set_seed(42);
  s.state.set_rng_state(std::string("\x00\x01\xff rng", 7));
  s.state.set_config_digest(std::string(64, 'a'));
  s.state.set_world_size(4);
  s.state.set_global_batch(256);
  s.state.set_config_yaml("optimizer:\n  lr: 0.05\n");
  s.state.set_optimizer("sgd");
  return s;
}

void expectBitIdentical(const checkpoint::NamedTensors& a, const checkpoint::NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.dtype(), b[i].second.dtype());
    ASSERT_EQ(a[i].second.sizes(), b[i].second.sizes());
    const torch::Tensor x = a[i].second.contiguous(), y = b[i].second.contiguous();
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0);
  }
}

std::set<std::string> namesIn(checkpoint::FileSystem& fs, const std::string& dir) {
  std::set<std::string> names;
  for (const checkpoint::DirEntry& e : fs.list(dir)) names.insert(e.name);
  return names;
}

class CheckpointTest : public ::testing::Test {
 protected:
  std::string stepDir(uint64_t step) {
    return tmp_.path() + "/" + checkpoint::CheckpointManager::dirName(step);
  }
  std::optional<CheckpointInfo> latest() {
    warnings_.clear();
    return manager_.latestValid(warnings_);
  }

  TempDir tmp_;
  checkpoint::PosixFileSystem posix_;
  checkpoint::FaultInjectingFileSystem fs_{posix_};
  checkpoint::CheckpointManager manager_{tmp_.path(), 3, fs_};
  std::vector<CheckpointWarning> warnings_;
};

TEST_F(CheckpointTest, RoundTripIsBitIdentical) {
  EXPECT_FALSE(latest().has_value());
  const checkpoint::CheckpointSnapshot saved = makeSnapshot(1200);
  const SaveResult result = manager_.save(saved);
  EXPECT_EQ(result.path, tmp_.path() + "/step-00001200");
  EXPECT_TRUE(result.warnings.empty());

  const auto found = latest();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->path, result.path);
  EXPECT_EQ(found->step, 1200u);
  EXPECT_TRUE(warnings_.empty());
  EXPECT_EQ(namesIn(fs_, tmp_.path()), std::set<std::string>{"step-00001200"});
  EXPECT_EQ(namesIn(fs_, result.path),
            (std::set<std::string>{"MANIFEST", "model.pt", "optim.pt", "state.pb"}));

  const checkpoint::CheckpointSnapshot loaded = manager_.load(found->path);
  expectBitIdentical(saved.model, loaded.model);
  expectBitIdentical(saved.optimizer_tensors, loaded.optimizer_tensors);
  EXPECT_EQ(loaded.optimizer_scalars, saved.optimizer_scalars);
  proto::CheckpointState expected = saved.state;
  expected.set_format_version(checkpoint::kCheckpointFormatVersion);
  EXPECT_EQ(loaded.state.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(loaded.state.rng_state(), std::string("\x00\x01\xff rng", 7));
}

TEST_F(CheckpointTest, InterruptedSavesAreIgnoredAndCleanedUp) {
  for (uint64_t step : {100, 200, 300}) manager_.save(makeSnapshot(step));
  // A crash before the rename leaves step-N.tmp; a directory without MANIFEST is what a crash
  // leaves behind a non-atomic copy (cp -r, rsync) of a checkpoint.
  fs_.rename(stepDir(200), stepDir(200) + ".tmp");
  fs_.removeAll(stepDir(300) + "/MANIFEST");

  const auto found = latest();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 100u);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0].path, stepDir(300));
  EXPECT_EQ(warnings_[0].reason,
            "invalid checkpoint, skipped: missing MANIFEST (an incomplete or interrupted save)");

  EXPECT_EQ(manager_.removeStaleTemporaries(), std::vector<std::string>{stepDir(200) + ".tmp"});
  fs_.rename(stepDir(100), stepDir(150) + ".tmp");  // stale again; the next save removes it
  manager_.save(makeSnapshot(400));
  EXPECT_EQ(namesIn(fs_, tmp_.path()), (std::set<std::string>{"step-00000300", "step-00000400"}));
}

TEST_F(CheckpointTest, CreatesParentsAndOrdersStepsNumerically) {
  const std::string nested = tmp_.path() + "/runs/a/ckpt";
  checkpoint::CheckpointManager manager(nested, 2, fs_);
  std::vector<CheckpointWarning> warnings;
  EXPECT_FALSE(manager.latestValid(warnings).has_value());  // no directory yet: no checkpoint
  EXPECT_TRUE(warnings.empty());
  manager.save(makeSnapshot(99999999));
  manager.save(makeSnapshot(100000000));  // nine digits: newer although "1" < "9"
  EXPECT_EQ(checkpoint::CheckpointManager::dirName(100000000), "step-100000000");
  EXPECT_EQ(manager.latestValid(warnings)->step, 100000000u);
  manager.save(makeSnapshot(100000001));
  EXPECT_EQ(namesIn(fs_, nested), (std::set<std::string>{"step-100000000", "step-100000001"}));
  EXPECT_TRUE(contains(errorOf([&] { manager.load(nested + "/not-a-step"); }),
                       nested + "/not-a-step: not a checkpoint directory name"));
}

// One kind of damage done to the newest of two checkpoints, and what verification must say.
struct Damage {
  const char* label;
  std::function<void(checkpoint::FileSystem&, const std::string&)> apply;
  const char* reason;  // expected in the warning and the load error
};

TEST_F(CheckpointTest, DamageIsDetectedBeforeDeserializationAndFallsBack) {
  const std::vector<Damage> damages = {
      {"torn MANIFEST",
       [](checkpoint::FileSystem& fs, const std::string& d) {
         const std::string m = fs.readFile(d + "/MANIFEST");
         fs.writeFile(d + "/MANIFEST", m.substr(0, m.size() / 2));
       },
       "torn MANIFEST"},
      {"truncated model.pt",
       [](checkpoint::FileSystem& fs, const std::string& d) {
         const std::string m = fs.readFile(d + "/model.pt");
         fs.writeFile(d + "/model.pt", m.substr(0, m.size() - 100));
       },
       "model.pt: size"},
      {"flipped byte in optim.pt",
       [](checkpoint::FileSystem& fs, const std::string& d) {
         std::string m = fs.readFile(d + "/optim.pt");
         m[m.size() / 2] ^= 0x20;
         fs.writeFile(d + "/optim.pt", m);
       },
       "optim.pt: SHA-256 mismatch"},
      {"missing state.pb",
       [](checkpoint::FileSystem& fs, const std::string& d) { fs.removeAll(d + "/state.pb"); },
       "state.pb listed in MANIFEST but missing"},
  };
  manager_.save(makeSnapshot(100));
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.label);
    manager_.save(makeSnapshot(200, 2));
    damage.apply(fs_, stepDir(200));
    const auto found = latest();
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->step, 100u);
    ASSERT_EQ(warnings_.size(), 1u);
    EXPECT_EQ(warnings_[0].path, stepDir(200));
    EXPECT_TRUE(contains(warnings_[0].reason, damage.reason)) << warnings_[0].reason;
    const std::string error = errorOf([&] { manager_.load(stepDir(200)); });
    EXPECT_TRUE(contains(error, stepDir(200) + ": invalid checkpoint: ")) << error;
    EXPECT_TRUE(contains(error, damage.reason)) << error;
    fs_.removeAll(stepDir(200));
  }
}

TEST_F(CheckpointTest, UnlistedFileIsReportedNotFatal) {
  manager_.save(makeSnapshot(100));
  fs_.writeFile(stepDir(100) + "/notes.txt", "by hand");
  const auto found = latest();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 100u);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0].str(), stepDir(100) + ": ignoring notes.txt: not listed in MANIFEST");
}

TEST_F(CheckpointTest, ExtraFilesAreListedVerifiedAndLoaded) {
  checkpoint::CheckpointSnapshot saved = makeSnapshot(100);
  saved.files["notes.txt"] = std::string("a\0b", 3);
  manager_.save(saved);
  EXPECT_EQ(manager_.load(stepDir(100)).files, saved.files);
  EXPECT_TRUE(latest().has_value());
  EXPECT_TRUE(warnings_.empty());  // listed in MANIFEST: not "unlisted"
  for (const char* name : {"MANIFEST", "state.pb", ".hidden", "a/b", ""}) {
    saved.files = {{name, "x"}};
    EXPECT_THROW(checkpoint::encodeSnapshot(saved), std::invalid_argument) << name;
  }
}

TEST_F(CheckpointTest, UndecodableButListedFileNamesItsPath) {
  const checkpoint::CheckpointSnapshot older = makeSnapshot(50);
  manager_.save(older);
  manager_.save(makeSnapshot(100));
  // A MANIFEST that vouches for garbage (a writer bug, not disk damage): decoding must still fail
  // with the file's path.
  const std::string dir = stepDir(100);
  fs_.writeFile(dir + "/model.pt", "not a zip");
  std::vector<checkpoint::ManifestEntry> entries;
  for (const char* name : {"model.pt", "optim.pt", "state.pb"}) {
    entries.push_back(checkpoint::describeFile(name, fs_.readFile(dir + "/" + name)));
  }
  fs_.writeFile(dir + "/MANIFEST", checkpoint::encodeManifest(entries));
  const std::string error = errorOf([&] { manager_.load(dir); });
  EXPECT_TRUE(contains(error, dir + "/model.pt: not a state_dict file: ")) << error;

  // A resume falls back to the older one.
  const auto loaded = manager_.loadLatestValid(warnings_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->first.step, 50u);
  expectBitIdentical(loaded->second.model, older.model);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_TRUE(contains(warnings_[0].str(), dir + ": undecodable checkpoint, skipped: " + dir +
                                               "/model.pt: not a state_dict file: "))
      << warnings_[0].str();
}

TEST_F(CheckpointTest, RetentionKeepsKValidAndNothingUnverified) {
  for (uint64_t step : {100, 200, 300, 400}) manager_.save(makeSnapshot(step));
  EXPECT_EQ(namesIn(fs_, tmp_.path()),
            (std::set<std::string>{"step-00000200", "step-00000300", "step-00000400"}));

  // A corrupt newer checkpoint does not count towards K, and is not removed.
  std::string optim = fs_.readFile(stepDir(400) + "/optim.pt");
  optim[10] ^= 1;
  fs_.writeFile(stepDir(400) + "/optim.pt", optim);
  SaveResult result = manager_.save(makeSnapshot(500));
  EXPECT_EQ(namesIn(fs_, tmp_.path()), (std::set<std::string>{"step-00000200", "step-00000300",
                                                              "step-00000400", "step-00000500"}));
  ASSERT_EQ(result.warnings.size(), 1u);
  EXPECT_EQ(result.warnings[0].path, stepDir(400));

  // keep = 1: the newest valid one stays; an invalid newer directory is never removed.
  fs_.createDir(stepDir(900));
  checkpoint::CheckpointManager keep_one(tmp_.path(), 1, fs_);
  keep_one.save(makeSnapshot(600));
  EXPECT_EQ(namesIn(fs_, tmp_.path()), (std::set<std::string>{"step-00000600", "step-00000900"}));
  std::vector<CheckpointWarning> warnings;
  EXPECT_EQ(keep_one.latestValid(warnings)->step, 600u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].path, stepDir(900));
}

TEST_F(CheckpointTest, FullDiskAtAnyPointLeavesOlderCheckpointsIntact) {
  const checkpoint::CheckpointSnapshot first = makeSnapshot(100);
  manager_.save(first);
  const uint64_t before = fs_.bytesWritten();
  manager_.save(makeSnapshot(150));
  const uint64_t save_bytes = fs_.bytesWritten() - before;
  fs_.removeAll(stepDir(150));
  for (uint64_t limit :
       {uint64_t{0}, uint64_t{1}, save_bytes / 3, save_bytes / 2, save_bytes - 5}) {
    SCOPED_TRACE("ENOSPC after " + std::to_string(limit) + " of " + std::to_string(save_bytes));
    fs_.failWritesAfter(limit);
    const std::string error = errorOf([&] { manager_.save(makeSnapshot(200)); });
    fs_.clear();
    EXPECT_TRUE(
        contains(error, "saving checkpoint " + stepDir(200) + " failed: " + stepDir(200) + ".tmp/"))
        << error;
    EXPECT_TRUE(contains(error, ": write: No space left on device (removed " + stepDir(200) +
                                    ".tmp; older checkpoints are untouched)"))
        << error;
    EXPECT_EQ(namesIn(fs_, tmp_.path()), std::set<std::string>{"step-00000100"});
    ASSERT_EQ(latest()->step, 100u);
    expectBitIdentical(manager_.load(stepDir(100)).model, first.model);
  }
}

TEST_F(CheckpointTest, FsyncAndRenameErrorsFailTheSave) {
  manager_.save(makeSnapshot(100));
  fs_.failSyncOf("step-00000200.tmp/MANIFEST");
  EXPECT_TRUE(contains(errorOf([&] { manager_.save(makeSnapshot(200)); }),
                       stepDir(200) + ".tmp/MANIFEST: fsync: Input/output error"));
  fs_.clear();
  fs_.failSyncOf("step-00000200.tmp");  // the directory, after its files
  EXPECT_EQ(errorOf([&] { manager_.save(makeSnapshot(200)); }),
            "saving checkpoint " + stepDir(200) + " failed: " + stepDir(200) +
                ".tmp: fsync directory: Input/output error (removed " + stepDir(200) +
                ".tmp; older checkpoints are untouched)");
  fs_.clear();
  fs_.failRenameTo("step-00000200");
  EXPECT_EQ(errorOf([&] { manager_.save(makeSnapshot(200)); }),
            "saving checkpoint " + stepDir(200) + " failed: " + stepDir(200) + ": rename from " +
                stepDir(200) + ".tmp: Input/output error (removed " + stepDir(200) +
                ".tmp; older checkpoints are untouched)");
  fs_.clear();
  EXPECT_EQ(namesIn(fs_, tmp_.path()), std::set<std::string>{"step-00000100"});

  // After the rename the new checkpoint is complete; the error says its durability is unknown.
  fs_.failSyncOf(tmp_.path());
  EXPECT_EQ(errorOf([&] { manager_.save(makeSnapshot(200)); }),
            "saving checkpoint " + stepDir(200) + " failed: " + tmp_.path() +
                ": fsync directory: Input/output error (after the rename: the checkpoint is "
                "complete but may not survive a crash)");
  fs_.clear();
  EXPECT_EQ(latest()->step, 200u);
}

TEST_F(CheckpointTest, SavingTheSameStepAgainReplacesIt) {
  manager_.save(makeSnapshot(100, 1));
  const checkpoint::CheckpointSnapshot second = makeSnapshot(100, 2);
  manager_.save(second);  // renameat2 exchange where the file system has it
  EXPECT_EQ(namesIn(fs_, tmp_.path()), std::set<std::string>{"step-00000100"});
  expectBitIdentical(manager_.load(stepDir(100)).model, second.model);

  fs_.disableExchange();  // the move-aside fallback
  const checkpoint::CheckpointSnapshot third = makeSnapshot(100, 3);
  manager_.save(third);
  EXPECT_EQ(namesIn(fs_, tmp_.path()), std::set<std::string>{"step-00000100"});
  expectBitIdentical(manager_.load(stepDir(100)).model, third.model);

  // If the second rename of the fallback fails, the old copy is put back.
  fs_.failRenameTo("/step-00000100", EIO, 1);
  EXPECT_TRUE(contains(errorOf([&] { manager_.save(makeSnapshot(100, 4)); }),
                       stepDir(100) + ": rename from "));
  fs_.clear();
  EXPECT_EQ(namesIn(fs_, tmp_.path()), std::set<std::string>{"step-00000100"});
  expectBitIdentical(manager_.load(stepDir(100)).model, third.model);
}

TEST_F(CheckpointTest, AsyncSnapshotIsImmutableWhileTrainingGoesOn) {
  torch::manual_seed(7);
  torch::Tensor weight = torch::randn({256, 256});
  const torch::Tensor original = weight.clone();
  checkpoint::CheckpointSnapshot snapshot = makeSnapshot(100);
  snapshot.model = checkpoint::cloneTensors({{"w", weight}});
  manager_.saveAsync(std::move(snapshot));
  weight.add_(1.0);  // the training thread's next step, while the save runs
  ASSERT_TRUE(manager_.waitForPending(milliseconds(60000)));
  EXPECT_FALSE(manager_.pending());
  const std::vector<SaveResult> done = manager_.takeCompleted();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].path, stepDir(100));
  expectBitIdentical(manager_.load(stepDir(100)).model, {{"w", original}});
}

TEST_F(CheckpointTest, BackgroundErrorsSurfaceOnTheNextCall) {
  manager_.save(makeSnapshot(100));
  fs_.failWritesAfter(10);
  manager_.saveAsync(makeSnapshot(200));
  const std::string error = errorOf([&] { manager_.waitForPending(milliseconds(60000)); });
  EXPECT_TRUE(contains(error, stepDir(200) + ".tmp/model.pt: write: No space left on device"))
      << error;
  EXPECT_TRUE(manager_.waitForPending(milliseconds(1000)));  // reported once

  manager_.saveAsync(makeSnapshot(300));  // still full
  // Not waitForPending(): that would surface the error the next save is meant to throw.
  ASSERT_TRUE(
      cumulus::testing::waitUntil([&] { return !manager_.pending(); }, std::chrono::seconds(60)))
      << "the failing save never ended";
  fs_.clear();
  // The next save waits for the failed one and throws its error instead of saving; the snapshot
  // it was given is left intact for a retry.
  checkpoint::CheckpointSnapshot retry = makeSnapshot(400);
  EXPECT_TRUE(contains(errorOf([&] { manager_.saveAsync(std::move(retry)); }),
                       stepDir(300) + ".tmp/model.pt: write: No space left on device"));
  ASSERT_EQ(retry.model.size(), 4u);
  manager_.saveAsync(std::move(retry));
  ASSERT_TRUE(manager_.waitForPending(milliseconds(60000)));
  EXPECT_EQ(latest()->step, 400u);
}

TEST_F(CheckpointTest, OptimizerStateRoundTripsThroughParameterNames) {
  torch::Tensor w1 = torch::ones({3}), w2 = torch::full({2}, 2.0);
  configs::OptimizerConfig config;
  config.name = configs::OptimizerName::kAdamw;
  config.weight_decay = 0.01;
  auto optimizer = makeOptimizer(config, {w1, w2});
  w1.mutable_grad() = torch::full({3}, 0.5);
  w2.mutable_grad() = torch::full({2}, -0.25);
  optimizer->step(0.1);
  optimizer->step(0.1);

  const std::vector<std::string> names = {"fc1.weight", "fc1.bias"};
  checkpoint::CheckpointSnapshot snapshot = makeSnapshot(2);
  snapshot.optimizer_tensors.clear();
  snapshot.optimizer_scalars.clear();
  checkpoint::addOptimizerState(optimizer->exportState(), names, snapshot);
  std::set<std::string> keys;
  for (const auto& [key, tensor] : snapshot.optimizer_tensors) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"fc1.bias.exp_avg", "fc1.bias.exp_avg_sq",
                                         "fc1.weight.exp_avg", "fc1.weight.exp_avg_sq"}));
  manager_.save(snapshot);

  // A fresh replica resumes from the file and takes the same next step, bit for bit.
  torch::Tensor r1 = w1.detach().clone(), r2 = w2.detach().clone();
  auto resumed = makeOptimizer(config, {r1, r2});
  resumed->importState(checkpoint::optimizerStateFrom(manager_.load(stepDir(2)), names));
  EXPECT_EQ(resumed->stepCount(), 2);
  r1.mutable_grad() = w1.grad().clone();
  r2.mutable_grad() = w2.grad().clone();
  optimizer->step(0.1);
  resumed->step(0.1);
  EXPECT_TRUE(torch::equal(w1, r1));
  EXPECT_TRUE(torch::equal(w2, r2));
  EXPECT_THROW(checkpoint::optimizerStateFrom(snapshot, {"other.weight", "fc1.bias"}),
               std::invalid_argument);
}

TEST_F(CheckpointTest, OptimizerStateKeysThatNameNoParameterAreRejected) {
  const std::vector<std::string> names = {"fc1.weight", "fc1.bias"};
  for (const std::string key : {"x.exp_avg", "2.exp_avg", "1x.exp_avg", "-1.exp_avg", "exp_avg"}) {
    checkpoint::OptimizerState state;
    state.name = "adamw";
    state.tensors[key] = torch::zeros({1});
    checkpoint::CheckpointSnapshot snapshot;
    try {
      checkpoint::addOptimizerState(state, names, snapshot);
      ADD_FAILURE() << key << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "optimizer state key \"" + key + "\" names no parameter (2 parameters)");
    }
  }
}

TEST_F(CheckpointTest, PythonTorchLoadReadsModelAndOptimizer) {
  const checkpoint::CheckpointSnapshot saved = makeSnapshot(100);
  manager_.save(saved);
  const std::string script = tmp_.path() + "/read.py";
  fs_.writeFile(script,
                "import sys, torch\n"
                "m = torch.load(sys.argv[1] + '/model.pt')\n"
                "o = torch.load(sys.argv[1] + '/optim.pt')\n"
                "for k, v in m.items(): print('model', k, v.dtype, '%.9e' % v.double().sum())\n"
                "for k, v in o['tensors'].items(): print('optim', k, '%.9e' % v.double().sum())\n"
                "print('scalars', sorted(o['scalars'].items()))\n");
  FILE* pipe = ::popen((CUMULUS_PYTHON " " + script + " " + stepDir(100) + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << out;

  std::string expected;
  char line[512];
  for (const auto& [name, t] : saved.model) {
    std::snprintf(line, sizeof(line), "model %s torch.%s %.9e\n", name.c_str(),
                  t.dtype() == torch::kFloat ? "float32" : "int64",
                  t.to(torch::kDouble).sum().item<double>());
    expected += line;
  }
  for (const auto& [name, t] : saved.optimizer_tensors) {
    std::snprintf(line, sizeof(line), "optim %s %.9e\n", name.c_str(),
                  t.to(torch::kDouble).sum().item<double>());
    expected += line;
  }
  expected += "scalars [('lr', 0.05), ('name', 'sgd'), ('step', 100)]\n";
  EXPECT_EQ(out, expected);
}

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Not a benchmark (those live in bench/): one pass over a convnet-sized snapshot that prints the
// figures and checks that a background save stalls the caller far less than a blocking one.
TEST_F(CheckpointTest, ConvnetSizedSnapshotTimings) {
  torch::manual_seed(0);
  models::ModelSpec spec;
  spec.name = "convnet";
  auto model = models::makeModel(spec);
  ASSERT_EQ(model->parameterCount(), 3274634);
  checkpoint::NamedTensors live = model->namedParameters();
  for (auto& buffer : model->namedBuffers()) live.push_back(buffer);
  configs::OptimizerConfig config;  // SGD with momentum: one buffer per parameter
  auto optimizer = makeOptimizer(config, model->parameters());
  for (auto& p : model->parameters()) p.mutable_grad() = torch::ones_like(p);
  optimizer->step(0.01);
  std::vector<std::string> names;
  for (const auto& [name, p] : model->namedParameters()) names.push_back(name);

  auto capture = [&](uint64_t step) {
    checkpoint::CheckpointSnapshot s;
    s.model = checkpoint::cloneTensors(live);
    checkpoint::addOptimizerState(optimizer->exportState(), names, s);
    s.state.set_step(step);
    return s;
  };
  double capture_ms = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    checkpoint::CheckpointSnapshot s = capture(1);
    capture_ms = std::min(capture_ms, msSince(start));
  }
  auto start = std::chrono::steady_clock::now();
  const SaveResult sync = manager_.save(capture(100));
  const double sync_ms = msSince(start);

  checkpoint::CheckpointSnapshot next = capture(200);
  start = std::chrono::steady_clock::now();
  manager_.saveAsync(std::move(next));
  const double stall_ms = msSince(start);
  ASSERT_TRUE(manager_.waitForPending(milliseconds(120000)));
  const double async_total_ms = msSince(start);

  const std::vector<SaveResult> background = manager_.takeCompleted();
  ASSERT_EQ(background.size(), 1u);
  double clone_model_ms = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t = std::chrono::steady_clock::now();
    const checkpoint::NamedTensors copy = checkpoint::cloneTensors(live);
    clone_model_ms = std::min(clone_model_ms, msSince(t));
  }
  start = std::chrono::steady_clock::now();
  const auto resumed = manager_.loadLatestValid(warnings_);
  const double resume_ms = msSince(start);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->first.step, 200u);

  std::printf(
      "convnet checkpoint: %.1f MB; capture %.2f ms (model clone alone %.2f ms); "
      "save %.1f ms (encode %.1f, write+fsync+rename %.1f, retention %.1f); "
      "saveAsync stall %.3f ms, background %.1f ms (encode %.1f, write %.1f, "
      "retention %.1f); loadLatestValid %.1f ms\n",
      sync.bytes / 1e6, capture_ms, clone_model_ms, sync_ms, sync.encode_seconds * 1e3,
      sync.write_seconds * 1e3, sync.retention_seconds * 1e3, stall_ms, async_total_ms,
      background[0].encode_seconds * 1e3, background[0].write_seconds * 1e3,
      background[0].retention_seconds * 1e3, resume_ms);
  RecordProperty("capture_ms", std::to_string(capture_ms));
  RecordProperty("save_ms", std::to_string(sync_ms));
  RecordProperty("async_stall_ms", std::to_string(stall_ms));
  EXPECT_GT(sync.bytes, 2 * 3274634 * 4u);  // model + momentum, float32
  EXPECT_LT(stall_ms, sync_ms / 4);
}

// restoreTraining (a resume, or the state a live peer sent) checks every tensor and the optimizer
// state before it copies anything: a state that does not fit leaves the model as it was.
TEST(RestoreTrainingTest, AStateThatDoesNotFitChangesNothingAndOneThatFitsIsBitIdentical) {
  models::ModelSpec spec;  // the default mlp
  configs::OptimizerConfig adamw;
  adamw.name = configs::OptimizerName::kAdamw;
  torch::manual_seed(1);
  auto trained = models::makeModel(spec);
  auto trained_optimizer = makeOptimizer(adamw, trained->parameters());
  for (auto& p : trained->parameters()) p.mutable_grad() = torch::ones_like(p);
  trained_optimizer->step(0.01);
  const Checkpoint state =
      captureCheckpoint(*trained, *trained_optimizer, configs::Experiment{}, RunEnv{}, {});

  torch::manual_seed(2);
  auto other = models::makeModel(spec);
  auto other_optimizer = makeOptimizer(adamw, other->parameters());
  const std::string before = parameterDigest(*other);
  ASSERT_NE(before, parameterDigest(*trained));
  Checkpoint bad = state;
  const std::string last = bad.tensors.back().first;
  bad.tensors.back().second = torch::zeros({3, 2});
  try {
    restoreTraining(bad, *other, *other_optimizer, "the training state sent by rank 1");
    ADD_FAILURE() << "a tensor of another shape was accepted";
  } catch (const ResumeError& e) {
    EXPECT_EQ(
        std::string(e.what()), "the training state sent by rank 1: model.pt tensor '" + last +
                                   "' has shape [3, 2], the model's is " + [&] {
                                     std::ostringstream out;
                                     out << state.tensors.back().second.sizes();
                                     return out.str();
                                   }());
  }
  EXPECT_EQ(parameterDigest(*other), before);  // the tensors before it were not copied either

  restoreTraining(state, *other, *other_optimizer, "the training state sent by rank 1");
  EXPECT_EQ(parameterDigest(*other), parameterDigest(*trained));
  for (auto* model : {trained.get(), other.get()}) {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::ones_like(p);
  }
  trained_optimizer->step(0.01);
  other_optimizer->step(0.01);
  EXPECT_EQ(parameterDigest(*other), parameterDigest(*trained));  // the optimizer state came too
}

}  // namespace
}  // namespace cumulus::trainer
