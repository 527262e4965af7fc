// The built-in models against their Python twins in models/fixtures/reference_models.py: same
// state_dict names and shapes, and the same logits once the C++ parameters are loaded in Python.
// This is what makes a Cumulus checkpoint's state_dict meaningful to torch.load.
#include "models/model.h"

#include "tests/models/fixtures.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cumulus::models {
namespace {

class PythonParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cumulus-parity-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

TEST_P(PythonParityTest, SameNamesShapesAndLogits) {
  ModelSpec spec;
  spec.name = GetParam();
  spec.hidden = {64, 32};
  torch::manual_seed(3);
  auto model = makeModel(spec);
  model->train(false);

  std::ostringstream names;
  {
    std::ofstream params(dir_ + "/params.bin", std::ios::binary);
    for (const auto& [name, value] : model->namedParameters()) {
      names << name << " ";
      for (int64_t d = 0; d < value.dim(); ++d) names << (d ? "x" : "") << value.size(d);
      names << "\n";
      const torch::Tensor flat = value.detach().contiguous();
      params.write(static_cast<const char*>(flat.data_ptr()),
                   static_cast<std::streamsize>(flat.numel() * 4));
    }
  }
  const std::string command = CUMULUS_PYTHON " " + fixtures::kFixtures +
                              "/reference_models.py --model " + spec.name + " --hidden 64,32" +
                              " --params " + dir_ + "/params.bin --logits " + dir_ +
                              "/logits.bin --names " + dir_ + "/names.txt";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  std::ifstream python_names(dir_ + "/names.txt");
  const std::string expected((std::istreambuf_iterator<char>(python_names)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(names.str(), expected);
  const torch::Tensor python_logits = fixtures::readLogits(dir_ + "/logits.bin");
  ASSERT_TRUE(python_logits.defined());
  const torch::Tensor logits = model->forward(fixtures::referenceInput());
  EXPECT_TRUE(torch::allclose(logits, python_logits, 1e-4, 1e-5)) << logits << python_logits;
}

INSTANTIATE_TEST_SUITE_P(BuiltIn, PythonParityTest, ::testing::Values("mlp", "convnet"));

}  // namespace
}  // namespace cumulus::models
