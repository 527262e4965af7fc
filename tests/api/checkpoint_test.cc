// Checkpoint and Checkpoints (<cumulus/checkpoint.h>): a module, an Adam optimizer, the sampler,
// torch's RNG and extra files round-trip through a directory; a corrupted newest checkpoint is
// skipped with a warning; restoring into a module that does not fit names the tensor.

#include "cumulus/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "cumulus/version.h"
#include "tests/test_support.h"

namespace cumulus {
namespace {

using cumulus::testing::TempDir;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    norm = register_module("norm", torch::nn::BatchNorm1d(3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return norm(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};
TORCH_MODULE(Net);

Net makeNet(uint64_t seed) {
  torch::manual_seed(seed);
  return Net();
}

void trainStep(Net& net, torch::optim::Optimizer& optimizer) {
  torch::manual_seed(5);  // the same batch every time
  const torch::Tensor x = torch::randn({6, 4});
  optimizer.zero_grad();
  net->forward(x).pow(2).mean().backward();
  optimizer.step();
}

std::vector<torch::Tensor> stateOf(Net& net) {
  std::vector<torch::Tensor> out;
  for (const auto& t : net->parameters()) out.push_back(t.detach().clone());
  for (const auto& t : net->buffers()) out.push_back(t.detach().clone());
  return out;
}

template <typename Error, typename Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error of the expected type";
}

Checkpoint smallCheckpoint(uint64_t step) {
  Checkpoint c;
  c.state.step = step;
  c.tensors.emplace_back("w", torch::full({2}, static_cast<double>(step)));
  c.files["notes.json"] = "{\"step\": " + std::to_string(step) + "}\n";
  return c;
}

TEST(Checkpoints, RoundTripOfModuleOptimizerSamplerRngAndFiles) {
  TempDir tmp;
  Net net = makeNet(1);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
  for (int i = 0; i < 3; ++i) trainStep(net, adam);

  Checkpoint c;
  c.state.step = 3;
  c.state.seed = 42;
  c.setSampler({2, 64});
  torch::manual_seed(11);  // a generator state that trainStep does not reach
  c.captureRng();
  const torch::Tensor after_capture = torch::rand({4});
  c.addModule(*net).addOptimizer(adam);
  const std::string blob("a\0b\xff", 4);
  c.files["blob.bin"] = blob;
  Checkpoints checkpoints(tmp.path() + "/run/checkpoints");
  const SaveResult saved = checkpoints.save(c);
  EXPECT_EQ(saved.path, tmp.path() + "/run/checkpoints/step-00000003");
  EXPECT_EQ(saved.step, 3u);
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(saved.path)) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"MANIFEST", "blob.bin", "model.pt", "optim.pt",
                                          "optimizer.pt", "state.pb"}));

  trainStep(net, adam);  // the uninterrupted run's next step
  const std::vector<torch::Tensor> expected = stateOf(net);

  std::vector<CheckpointWarning> warnings;
  std::optional<Checkpoint> latest = checkpoints.loadLatest(&warnings);
  ASSERT_TRUE(latest.has_value());
  EXPECT_TRUE(warnings.empty());
  // Built with another learning rate: restoreOptimizer puts the saved options back too.
  Net resumed = makeNet(99);
  torch::optim::Adam resumed_adam(resumed->parameters(), torch::optim::AdamOptions(0.5));
  latest->restoreModule(*resumed);
  latest->restoreOptimizer(resumed_adam);
  EXPECT_EQ(static_cast<torch::optim::AdamOptions&>(resumed_adam.param_groups()[0].options()).lr(),
            0.01);
  trainStep(resumed, resumed_adam);
  const std::vector<torch::Tensor> got = stateOf(resumed);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], expected[i])) << i;

  EXPECT_EQ(latest->sampler(), (SamplerState{2, 64}));
  EXPECT_EQ(latest->state.step, 3u);
  EXPECT_EQ(latest->state.seed, 42u);
  EXPECT_EQ(latest->state.format_version, 1u);
  EXPECT_EQ(latest->state.framework_version,
            std::string("cumulus ") + version() + ", libtorch " TORCH_VERSION);
  EXPECT_GT(latest->state.created_unix_ms, 0);
  EXPECT_EQ(latest->files.at("blob.bin"), blob);
  EXPECT_EQ(latest->files.size(), 2u);  // blob.bin, optimizer.pt
  EXPECT_TRUE(torch::equal(latest->tensor("fc.weight"), c.tensor("fc.weight")));
  EXPECT_TRUE(torch::equal(latest->tensor("norm.running_mean"), c.tensor("norm.running_mean")));
  EXPECT_FALSE(latest->tensor("no.such").defined());
  // The caller's checkpoint is untouched by save().
  EXPECT_EQ(c.state.format_version, 0u);

  EXPECT_FALSE(torch::equal(torch::rand({4}), after_capture));
  latest->restoreRng();
  EXPECT_TRUE(torch::equal(torch::rand({4}), after_capture));
}

TEST(Checkpoints, CorruptNewestIsSkippedWithAWarningNamingIt) {
  TempDir tmp;
  Checkpoints checkpoints(tmp.path());
  checkpoints.save(smallCheckpoint(1));
  checkpoints.save(smallCheckpoint(2));
  {
    std::fstream file(tmp.path() + "/step-00000002/notes.json",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2);
    file.put('X');
  }
  std::ofstream(tmp.path() + "/step-00000001/stray.txt") << "left by an editor\n";

  std::vector<CheckpointWarning> warnings;
  const std::optional<Checkpoint> latest = checkpoints.loadLatest(&warnings);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->state.step, 1u);
  EXPECT_EQ(latest->files.at("notes.json"), "{\"step\": 1}\n");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0].str(),
            tmp.path() +
                "/step-00000002: invalid checkpoint, skipped: notes.json: SHA-256 mismatch "
                "(corrupt: content changed after the save)");
  EXPECT_EQ(warnings[1].str(),
            tmp.path() + "/step-00000001: ignoring stray.txt: not listed in MANIFEST");

  const std::string path = tmp.path() + "/step-00000002";
  EXPECT_EQ(errorOf<CheckpointError>([&] { checkpoints.load(path); }),
            path +
                ": invalid checkpoint: notes.json: SHA-256 mismatch (corrupt: content changed "
                "after the save)");
}

TEST(Checkpoints, MissingDirectoryHasNoCheckpoint) {
  TempDir tmp;
  Checkpoints checkpoints(tmp.path() + "/never");
  EXPECT_FALSE(checkpoints.loadLatest().has_value());
  EXPECT_FALSE(checkpoints.latestValid().has_value());
  EXPECT_TRUE(checkpoints.list().empty());
  EXPECT_EQ(Checkpoints::dirName(1200), "step-00001200");
  EXPECT_EQ(errorOf<std::invalid_argument>([&] { Checkpoints(tmp.path(), 0); }),
            "Checkpoints: keep must be >= 1 (the newest valid checkpoint is always kept), got 0");
}

TEST(Checkpoints, ReservedOrBadExtraFileNameThrows) {
  TempDir tmp;
  Checkpoints checkpoints(tmp.path() + "/c");
  Checkpoint c = smallCheckpoint(1);
  c.files["MANIFEST"] = "mine";
  EXPECT_EQ(errorOf<std::invalid_argument>([&] { checkpoints.save(c); }),
            "checkpoint file name \"MANIFEST\" is reserved (model.pt, optim.pt, state.pb and "
            "MANIFEST are the checkpoint's own): choose another");
  c.files.erase("MANIFEST");
  c.files[".hidden"] = "x";
  EXPECT_EQ(errorOf<std::invalid_argument>([&] { checkpoints.saveAsync(std::move(c)); }),
            "checkpoint file name \".hidden\" is not allowed: use [A-Za-z0-9_.-], not starting "
            "with '.'");
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/c"));
}

TEST(Checkpoints, SaveAsyncCommitsInTheBackground) {
  TempDir tmp;
  Checkpoints checkpoints(tmp.path());
  checkpoints.saveAsync(smallCheckpoint(4));
  EXPECT_TRUE(checkpoints.waitForPending());
  const std::vector<SaveResult> done = checkpoints.takeCompleted();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].path, tmp.path() + "/step-00000004");
  const std::optional<CheckpointInfo> info = checkpoints.latestValid();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->step, 4u);
}

TEST(Checkpoint, RestoreModuleThatDoesNotFitNamesTheTensor) {
  torch::manual_seed(0);
  torch::nn::Linear small(4, 3);
  torch::nn::Linear wide(5, 3);
  Checkpoint c;
  c.addModule(*small);
  EXPECT_EQ(errorOf<CheckpointError>([&] { c.restoreModule(*wide); }),
            "tensor \"weight\": shape [3, 4] in the checkpoint, [3, 5] in the module");
  torch::nn::Linear doubles(4, 3);
  doubles->to(torch::kFloat64);
  EXPECT_EQ(errorOf<CheckpointError>([&] { c.restoreModule(*doubles); }),
            "tensor \"weight\": dtype Float in the checkpoint, Double in the module");
  torch::nn::Linear no_bias(torch::nn::LinearOptions(4, 3).bias(false));
  EXPECT_EQ(errorOf<CheckpointError>([&] { c.restoreModule(*no_bias); }),
            "tensor \"bias\" of the checkpoint is not in the module");
  Checkpoint prefixed;
  prefixed.addModule(*no_bias, "actor.");
  EXPECT_EQ(errorOf<CheckpointError>([&] { prefixed.restoreModule(*small, "actor."); }),
            "tensor \"actor.bias\" of the module is not in the checkpoint");
  // A module that did not fit is left as it was; one that fits takes the values.
  torch::nn::Linear other(4, 3);
  EXPECT_FALSE(torch::equal(other->weight, small->weight));
  c.restoreModule(*other);
  EXPECT_TRUE(torch::equal(other->weight, small->weight));
  EXPECT_TRUE(torch::equal(other->bias, small->bias));
}

TEST(Checkpoint, MissingOptimizerOrRngIsACheckpointError) {
  Checkpoint c;
  torch::nn::Linear net(2, 2);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_EQ(errorOf<CheckpointError>([&] { c.restoreOptimizer(sgd); }),
            "the checkpoint has no file \"optimizer.pt\" with an optimizer's state (addOptimizer "
            "writes it)");
  torch::nn::Linear bigger(3, 3);
  torch::optim::SGD other(bigger->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  c.addOptimizer(
      torch::optim::SGD(std::vector<torch::Tensor>{net->weight}, torch::optim::SGDOptions(0.1)),
      "one.pt");
  EXPECT_EQ(errorOf<CheckpointError>([&] {
              c.restoreOptimizer(other, "one.pt");
            }).rfind("file \"one.pt\" does not load into the optimizer: ", 0),
            0u);
  EXPECT_EQ(errorOf<CheckpointError>([&] { c.restoreRng(); }),
            "state.rng_state is empty: call captureRng() before saving");
  c.state.rng_state = "short";
  EXPECT_NE(errorOf<CheckpointError>([&] {
              c.restoreRng();
            }).find("state.rng_state (5 bytes) is not a CPU generator's state: "),
            std::string::npos);
}

// packCheckpoint / unpackCheckpoint: a checkpoint's files behind their MANIFEST, in one string.
// The round trip restores a model and its optimizer to bit-identical next steps; any change to
// the bytes is a CheckpointError naming the source and the file, found before anything decodes.
TEST(PackedCheckpoint, RoundTripsTheModuleOptimizerSamplerAndFiles) {
  Net net = makeNet(1);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
  for (int i = 0; i < 2; ++i) trainStep(net, adam);
  Checkpoint c;
  c.state.step = 2;
  c.state.samples_seen = 12;
  c.state.grad_accumulation = 3;
  c.state.batch_shares = {5, 7};
  c.setSampler({1, 6});
  c.addModule(*net).addOptimizer(adam);
  c.optimizer_tensors.emplace_back("slot", torch::arange(3, torch::kFloat64));
  c.optimizer_scalars["name"] = std::string("custom");
  c.optimizer_scalars["step"] = int64_t{2};
  c.optimizer_scalars["beta"] = 0.5;
  c.files["zz.bin"] = std::string("\0\x01\xff", 3);
  const std::string packed = packCheckpoint(c);
  EXPECT_EQ(packed.rfind("cumulus-checkpoint-manifest 1\n", 0), 0u);

  trainStep(net, adam);
  const std::vector<torch::Tensor> expected = stateOf(net);
  const Checkpoint got = unpackCheckpoint(packed, "the state sent by rank 1");
  Net healed = makeNet(99);
  torch::optim::Adam healed_adam(healed->parameters(), torch::optim::AdamOptions(0.5));
  got.restoreModule(*healed);
  got.restoreOptimizer(healed_adam);
  trainStep(healed, healed_adam);
  const std::vector<torch::Tensor> after = stateOf(healed);
  ASSERT_EQ(after.size(), expected.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(torch::equal(after[i], expected[i])) << i;

  EXPECT_EQ(got.state.step, 2u);
  EXPECT_EQ(got.state.samples_seen, 12u);
  EXPECT_EQ(got.state.grad_accumulation, 3u);
  EXPECT_EQ(got.state.batch_shares, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(got.sampler(), (SamplerState{1, 6}));
  ASSERT_EQ(got.optimizer_tensors.size(), 1u);
  EXPECT_EQ(got.optimizer_tensors[0].first, "slot");
  EXPECT_EQ(got.optimizer_tensors[0].second.scalar_type(), torch::kFloat64);
  EXPECT_TRUE(torch::equal(got.optimizer_tensors[0].second, torch::arange(3, torch::kFloat64)));
  EXPECT_EQ(got.optimizer_scalars, c.optimizer_scalars);
  EXPECT_EQ(got.files.at("zz.bin"), std::string("\0\x01\xff", 3));
  EXPECT_EQ(got.files.size(), 2u);  // zz.bin, optimizer.pt
}

// The size its MANIFEST line gives `name` ("<sha256> <size> <name>").
std::string listedSize(const std::string& packed, const std::string& name) {
  const size_t line_end = packed.find(" " + name + "\n");
  const size_t size_start = packed.rfind(' ', line_end - 1) + 1;
  return packed.substr(size_start, line_end - size_start);
}

TEST(PackedCheckpoint, AChangedTruncatedOrLongerPackIsRefusedNamingTheFile) {
  const std::string packed = packCheckpoint(smallCheckpoint(7));
  const std::string from = "the state sent by rank 2";
  // The files follow the MANIFEST in its order, by name: model.pt, notes.json, optim.pt, state.pb.
  const size_t end_line = packed.find("\nend ") + 1;
  const size_t body = packed.find('\n', end_line) + 1;
  std::string flipped = packed;
  flipped[body] = static_cast<char>(flipped[body] ^ 1);
  EXPECT_EQ(errorOf<CheckpointError>([&] { unpackCheckpoint(flipped, from); }),
            from + ": model.pt: SHA-256 mismatch (corrupt: changed in transit)");
  const std::string state_size = listedSize(packed, "state.pb");
  EXPECT_EQ(errorOf<CheckpointError>(
                [&] { unpackCheckpoint(packed.substr(0, packed.size() - 1), from); }),
            from + ": state.pb: MANIFEST says " + state_size + " bytes, but only " +
                std::to_string(std::stoull(state_size) - 1) + " follow (truncated)");
  EXPECT_EQ(errorOf<CheckpointError>([&] { unpackCheckpoint(packed.substr(0, body), from); }),
            from + ": model.pt: MANIFEST says " + listedSize(packed, "model.pt") +
                " bytes, but only 0 follow (truncated)");
  EXPECT_EQ(errorOf<CheckpointError>([&] { unpackCheckpoint(packed + "xy", from); }),
            from + ": 2 bytes follow the last file that MANIFEST lists");
  EXPECT_EQ(errorOf<CheckpointError>([&] { unpackCheckpoint("not a checkpoint", from); }),
            from + ": torn MANIFEST: no \"end\" line in the first 16 bytes");
  std::string unlisted = packed;
  unlisted.replace(unlisted.find(" state.pb\n"), 10, " other.pb\n");
  EXPECT_EQ(errorOf<CheckpointError>([&] { unpackCheckpoint(unlisted, from); }),
            from + ": corrupt MANIFEST: its SHA-256 does not match its end line");
}

}  // namespace
}  // namespace cumulus
