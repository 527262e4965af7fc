#include "models/model.h"

#include "tests/models/fixtures.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/version.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cumulus::models {
namespace {

using fixtures::kFixtures;
using fixtures::readLogits;
using fixtures::referenceInput;

// Comparing float32 logits made on another machine: each of the ~800-term dot products may round
// differently there (another BLAS kernel, vector width or FMA), a few ulps, about 1e-6 relative
// after the batch norm. A wrong model, input or mode is off in the first decimal.
constexpr double kCrossMachineRtol = 1e-4;
constexpr double kCrossMachineAtol = 1e-5;

std::unique_ptr<Model> load(const std::string& path) {
  ModelSpec spec;
  spec.name = "torchscript:" + path;
  return makeModel(spec);
}

std::string loadError(const std::string& path) {
  try {
    load(path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

// fc1 784*32+32 + bn 32+32 + fc2 32*10+10.
TEST(TorchScriptTest, LoadsNamesAndCounts) {
  const std::string path = kFixtures + "/tiny_scripted.pt";
  auto model = load(path);
  EXPECT_EQ(model->parameterCount(), 25514);
  EXPECT_EQ(model->summary(), "torchscript:" + path + " (6 tensors), 25,514 parameters");
  std::vector<std::string> params, buffers;
  for (const auto& p : model->namedParameters()) params.push_back(p.first);
  for (const auto& b : model->namedBuffers()) buffers.push_back(b.first);
  EXPECT_EQ(params, (std::vector<std::string>{"fc1.weight", "fc1.bias", "bn.weight", "bn.bias",
                                              "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(buffers, (std::vector<std::string>{"bn.running_mean", "bn.running_var",
                                               "bn.num_batches_tracked"}));
  EXPECT_EQ(model->namedBuffers()[2].second.item<int64_t>(), 3);  // the script's 3 passes
}

TEST(TorchScriptTest, ForwardMatchesPython) {
  auto model = load(kFixtures + "/tiny_scripted.pt");
  model->train(false);
  const torch::Tensor logits = model->forward(referenceInput());
  const torch::Tensor expected = readLogits(kFixtures + "/tiny_scripted_logits.bin");
  EXPECT_TRUE(torch::allclose(logits, expected, kCrossMachineRtol, kCrossMachineAtol))
      << logits << expected;
  // Training mode normalizes by the batch's own statistics instead, so the output changes.
  model->train(true);
  EXPECT_FALSE(torch::allclose(model->forward(referenceInput()), expected, 1e-3, 1e-3));
}

TEST(TorchScriptTest, GradientsReachEveryParameter) {
  auto model = load(kFixtures + "/tiny_scripted.pt");
  model->train(true);
  const torch::Tensor logits = model->forward(torch::rand({4, 1, 28, 28}));
  torch::nn::functional::cross_entropy(logits, torch::tensor({0, 1, 2, 3})).backward();
  for (const auto& [name, value] : model->namedParameters()) {
    ASSERT_TRUE(value.grad().defined()) << name;
    EXPECT_GT(value.grad().abs().sum().item<double>(), 0.0) << name;
  }
  // The tensors handed out alias the module's: an update through them changes the output.
  model->train(false);
  const torch::Tensor before = model->forward(referenceInput());
  {
    torch::NoGradGuard no_grad;
    model->namedParameters().back().second.add_(1.0);  // fc2.bias
  }
  EXPECT_TRUE(torch::allclose(model->forward(referenceInput()), before + 1.0, 1e-5, 1e-5));
}

// The model runs with the graph executor's optimizing passes off (eager autograd, op by op): the
// gradients are those of the optimized executor's symbolic differentiation, and the thread's
// setting, which is per thread, is left as it was.
TEST(TorchScriptTest, RunsInterpretedWithTheOptimizedExecutorsGradients) {
  const std::string path = kFixtures + "/tiny_scripted.pt";
  const torch::Tensor inputs = torch::rand({4, 1, 28, 28});
  const torch::Tensor targets = torch::tensor({0, 1, 2, 3});
  ASSERT_TRUE(torch::jit::getGraphExecutorOptimize());
  auto model = load(path);
  model->train(true);
  torch::nn::functional::cross_entropy(model->forward(inputs), targets).backward();
  EXPECT_TRUE(torch::jit::getGraphExecutorOptimize());

  // The same file through the optimizing executor, past its profiling runs.
  torch::jit::Module optimized = torch::jit::load(path);
  optimized.train(true);
  for (int run = 0; run < 4; ++run) {
    for (const auto& p : optimized.parameters()) p.mutable_grad().reset();
    const torch::Tensor logits = optimized.forward({inputs}).toTensor();
    torch::nn::functional::cross_entropy(logits, targets).backward();
  }
  const auto mine = model->namedParameters();
  size_t i = 0;
  for (const auto& p : optimized.named_parameters()) {
    ASSERT_LT(i, mine.size());
    EXPECT_EQ(mine[i].first, p.name);
    EXPECT_TRUE(torch::allclose(mine[i].second.grad(), p.value.grad(), 1e-5, 1e-6)) << p.name;
    ++i;
  }

  bool other_thread_optimizes = false;
  {
    const torch::jit::GraphOptimizerEnabledGuard off(false);
    std::thread([&] { other_thread_optimizes = torch::jit::getGraphExecutorOptimize(); }).join();
  }
  EXPECT_TRUE(other_thread_optimizes);
}

TEST(TorchScriptTest, ForwardErrorNamesTheModel) {
  const std::string path = kFixtures + "/tiny_scripted.pt";
  auto model = load(path);
  try {
    model->forward(torch::rand({2, 3, 32, 32}));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "torchscript model " + path +
                                         ": forward failed: RuntimeError: addmm: mat1 and mat2 shapes "
                                         "cannot be multiplied (2x3072 and 784x32)");
  }
}

TEST(TorchScriptTest, MissingFileNamesThePath) {
  EXPECT_EQ(loadError("/nonexistent/dir/model.pt"),
            "cannot load TorchScript model /nonexistent/dir/model.pt: No such file or directory");
  EXPECT_EQ(loadError(kFixtures), "cannot load TorchScript model " + kFixtures +
                                      ": it is a directory, not a torch.jit.save file");
}

TEST(TorchScriptTest, CorruptFileNamesThePath) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/cumulus-corrupt-" +
                           std::to_string(::getpid()) + ".pt";
  {  // the fixture cut in half, as an interrupted copy would leave it
    std::ifstream in(kFixtures + "/tiny_scripted.pt", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::string error = loadError(path);
  std::filesystem::remove(path);
  EXPECT_EQ(
      error,
      "cannot load TorchScript model " + path +
          ": PytorchStreamReader failed reading zip archive: failed finding central directory. "
          "This is an internal miniz error. If you are seeing this error, there is a high "
          "likelihood that your checkpoint file is corrupted. This can happen if the checkpoint "
          "was not saved properly, was transferred incorrectly, or the file was modified after "
          "saving.");
}

// A file whose archive says a newer file format than this torch reads (as a newer torch's would):
// refused, naming the file and both versions. The file is this torch's own export of a Linear
// layer with its "version" record raised to 11 (torch 2.15 reads up to 10).
TEST(TorchScriptTest, AFileFromANewerTorchIsRefusedNamingBothVersions) {
  char tmpl[] = "/tmp/cumulus-newer-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/newer.pt";
  const std::string script = dir + "/make.py";
  std::ofstream(script) << "import sys, warnings, zipfile, torch\n"
                           "warnings.simplefilter('ignore')\n"
                           "torch.jit.script(torch.nn.Linear(3, 2)).save(sys.argv[1] + '.tmp')\n"
                           "with zipfile.ZipFile(sys.argv[1] + '.tmp') as src, \\\n"
                           "     zipfile.ZipFile(sys.argv[1], 'w') as dst:\n"
                           "    for item in src.infolist():\n"
                           "        data = src.read(item)\n"
                           "        if item.filename.endswith('/version'):\n"
                           "            data = b'11\\n'\n"
                           "        dst.writestr(item, data)\n";
  const std::string command = CUMULUS_PYTHON " " + script + " " + path;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const std::string error = loadError(path);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(error, "cannot load TorchScript model " + path +
                       ": it was saved by a newer torch than this one (its file format version is "
                       "11; torch " TORCH_VERSION ", which Cumulus is built with, reads up to "
                       "version 10): save it with torch " TORCH_VERSION
                       ", or build Cumulus against the torch that saved it");
}

// Rebuild the fixture with the project environment's torch (the one this build links), and check
// the new file against the committed one.
TEST(TorchScriptTest, RegeneratedFixtureMatches) {
  char tmpl[] = "/tmp/cumulus-fixture-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string command =
      CUMULUS_PYTHON " " + kFixtures + "/make_tiny_scripted.py --out " + dir + " >/dev/null";
  const int rc = std::system(command.c_str());
  ASSERT_EQ(rc, 0) << command;
  auto model = load(dir + "/tiny_scripted.pt");
  model->train(false);
  const torch::Tensor regenerated = readLogits(dir + "/tiny_scripted_logits.bin");
  const torch::Tensor committed = readLogits(kFixtures + "/tiny_scripted_logits.bin");
  std::filesystem::remove_all(dir);
  // Bit-exact where it is guaranteed: Python's torch and LibTorch are one library build on this
  // host, so the C++ forward of the regenerated module reproduces Python's logits exactly.
  EXPECT_TRUE(torch::equal(model->forward(referenceInput()), regenerated))
      << model->forward(referenceInput()) << regenerated;
  // The committed logits were made on another machine: another CPU and kernel path (BLAS,
  // vector width, FMA) may change the last bits. The stated tolerance is far below anything a
  // wrong model or input would give (they differ in the first decimal; see ForwardMatchesPython).
  EXPECT_TRUE(torch::allclose(regenerated, committed, kCrossMachineRtol, kCrossMachineAtol))
      << regenerated << committed;
}

}  // namespace
}  // namespace cumulus::models
