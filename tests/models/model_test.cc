#include "models/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace cumulus::models {
namespace {

std::vector<std::string> names(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& n : named) out.push_back(n.first);
  return out;
}

std::string errorOf(const ModelSpec& spec) {
  try {
    makeModel(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

ModelSpec named(const std::string& name) {
  ModelSpec spec;
  spec.name = name;
  return spec;
}

// 784*256+256 + 256*128+128 + 128*100+100 + 100*10+10 = 200960 + 32896 + 12900 + 1010.
TEST(MlpTest, ShapesNamesAndCount) {
  auto model = makeModel(named("mlp"));
  EXPECT_EQ(model->forward(torch::rand({5, 1, 28, 28})).sizes(), torch::IntArrayRef({5, 10}));
  EXPECT_EQ(model->parameterCount(), 247766);
  EXPECT_EQ(model->summary(), "mlp 784-256-128-100-10, 247,766 parameters");
  EXPECT_EQ(names(model->namedParameters()),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                      "layers.2.bias", "layers.4.weight", "layers.4.bias",
                                      "layers.6.weight", "layers.6.bias"}));
  EXPECT_EQ(model->namedParameters()[0].second.sizes(), torch::IntArrayRef({256, 784}));
  EXPECT_TRUE(model->namedBuffers().empty());
  EXPECT_EQ(model->parameters().size(), 8u);
}

TEST(MlpTest, DropoutActsOnlyInTraining) {
  ModelSpec spec = named("mlp");
  spec.hidden = {64};
  spec.dropout = 0.5;
  auto model = makeModel(spec);
  EXPECT_EQ(model->summary(), "mlp 784-64-10, dropout 0.5, 50,890 parameters");
  EXPECT_EQ(names(model->namedParameters()),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.3.weight",
                                      "layers.3.bias"}));
  const torch::Tensor x = torch::rand({8, 1, 28, 28});
  model->train(true);
  EXPECT_FALSE(torch::equal(model->forward(x), model->forward(x)));
  model->train(false);
  EXPECT_TRUE(torch::equal(model->forward(x), model->forward(x)));
}

// conv1 5*5*1*32+32 = 832, conv2 5*5*32*64+64 = 51264, fc1 7*7*64*1024+1024 = 3212288,
// fc2 1024*10+10 = 10250: the TensorFlow tutorial's 3,274,634.
TEST(ConvnetTest, ShapesNamesAndCount) {
  ModelSpec spec = named("convnet");
  spec.dropout = 0.4;
  auto model = makeModel(spec);
  EXPECT_EQ(model->forward(torch::rand({3, 1, 28, 28})).sizes(), torch::IntArrayRef({3, 10}));
  EXPECT_EQ(model->parameterCount(), 3274634);
  EXPECT_EQ(model->summary(),
            "convnet 1x28x28 conv5x5x32-pool-conv5x5x64-pool-1024-10, dropout 0.4, 3,274,634 "
            "parameters");
  EXPECT_EQ(names(model->namedParameters()),
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                      "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(model->namedParameters()[4].second.sizes(), torch::IntArrayRef({1024, 3136}));
}

// 3x32x32 in, 100 classes: conv1 2432 + conv2 51264 + fc1 (8*8*64)*1024+1024 + fc2 102500.
TEST(ConvnetTest, FollowsInputShapeAndClasses) {
  ModelSpec spec = named("convnet");
  spec.input_shape = {3, 32, 32};
  spec.num_classes = 100;
  auto model = makeModel(spec);
  EXPECT_EQ(model->forward(torch::rand({2, 3, 32, 32})).sizes(), torch::IntArrayRef({2, 100}));
  EXPECT_EQ(model->parameterCount(), 2432 + 51264 + 4195328 + 102500);
}

TEST(ModelTest, InitIsDeterministicGivenTorchSeed) {
  torch::manual_seed(7);
  auto a = makeModel(named("mlp"));
  torch::manual_seed(7);
  auto b = makeModel(named("mlp"));
  const auto pa = a->parameters();
  const auto pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
}

TEST(ModelTest, GradientsReachEveryParameter) {
  for (const std::string name : {"mlp", "convnet"}) {
    auto model = makeModel(named(name));
    const torch::Tensor logits = model->forward(torch::rand({4, 1, 28, 28}));
    torch::nn::functional::cross_entropy(logits, torch::tensor({0, 1, 2, 3})).backward();
    for (const auto& [param, value] : model->namedParameters()) {
      ASSERT_TRUE(value.grad().defined()) << name << " " << param;
      EXPECT_GT(value.grad().abs().sum().item<double>(), 0.0) << name << " " << param;
    }
  }
}

TEST(ModelTest, WrongInputShapeNamesTheSpec) {
  auto model = makeModel(named("mlp"));
  try {
    model->forward(torch::rand({2, 3, 32, 32}));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(
        e.what(),
        "model \"mlp\" expects input [N, 1, 28, 28] (model.input_shape), got [2, 3, 32, 32]");
  }
}

TEST(ModelTest, UnknownNameListsKnownOnes) {
  EXPECT_EQ(errorOf(named("mpl")),
            "unknown model \"mpl\"; known models: mlp, convnet, torchscript:<path> (did you mean "
            "\"mlp\"?)");
  EXPECT_EQ(errorOf(named("resnet50")),
            "unknown model \"resnet50\"; known models: mlp, convnet, torchscript:<path>");
  EXPECT_EQ(errorOf(named("torchscrpt:a.pt")),
            "unknown model \"torchscrpt:a.pt\"; known models: mlp, convnet, torchscript:<path> "
            "(did you mean \"torchscript:<path>\"?)");
  EXPECT_EQ(errorOf(named("torchscript:")),
            "model \"torchscript:\" needs a file path after the colon, e.g. "
            "torchscript:models/fixtures/tiny_scripted.pt");
  EXPECT_EQ(modelNames(), (std::vector<std::string>{"mlp", "convnet", "torchscript:<path>"}));
}

TEST(ModelTest, RejectsBadSpecs) {
  ModelSpec spec = named("mlp");
  spec.hidden = {64, 0};
  EXPECT_EQ(errorOf(spec), "model \"mlp\": hidden widths must be positive, got 0");
  spec = named("convnet");
  spec.dropout = 1.0;
  EXPECT_EQ(errorOf(spec), "model \"convnet\": dropout must lie in [0, 1), got 1.000000");
  spec = named("convnet");
  spec.input_shape = {1, 28};
  EXPECT_EQ(errorOf(spec), "model \"convnet\": input_shape must be 3 positive sizes (C, H, W)");
  spec.input_shape = {1, 3, 28};
  EXPECT_EQ(errorOf(spec),
            "model \"convnet\": input_shape 1x3x28 is too small for two 2x2 pools (H and W must "
            "be at least 4)");
  spec = named("mlp");
  spec.num_classes = 0;
  EXPECT_EQ(errorOf(spec), "model \"mlp\": num_classes must be positive, got 0");
  spec = named("mlp");
  spec.input_shape = {};
  EXPECT_EQ(errorOf(spec), "model \"mlp\": input_shape must be one or more positive sizes");
}

// .npy samples of any shape: the mlp flattens one sample, whatever its rank.
TEST(ModelTest, MlpTakesSamplesOfAnyShape) {
  ModelSpec spec = named("mlp");
  spec.input_shape = {13};
  spec.hidden = {4};
  spec.num_classes = 3;
  auto model = makeModel(spec);
  EXPECT_EQ(model->forward(torch::rand({5, 13})).sizes(), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(model->summary(), "mlp 13-4-3, 71 parameters");
  try {
    model->forward(torch::rand({5, 12}));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "model \"mlp\" expects input [N, 13] (model.input_shape), got [5, 12]");
  }
}

}  // namespace
}  // namespace cumulus::models
