// Autocast (<cumulus/precision.h>): bf16 inside the guard, float32 outside; float32 weights get
// float32 gradients through the casts; nested guards restore the state they found.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "cumulus/precision.h"
#include "models/model.h"

namespace cumulus {
namespace {

TEST(AutocastTest, Bf16RunsMatrixProductsInBf16OnlyInsideTheGuard) {
  const torch::Tensor a = torch::randn({8, 16}), b = torch::randn({16, 4});
  {
    Autocast autocast(Precision::kBf16);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    // Autocast keeps reductions such as softmax in float32.
    EXPECT_EQ(torch::softmax(a, 1).scalar_type(), torch::kFloat32);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat32);
}

TEST(AutocastTest, Fp32ChangesNothingAndAutoIsRefused) {
  const torch::Tensor a = torch::randn({8, 16}), b = torch::randn({16, 4});
  {
    Autocast autocast(Precision::kFp32);
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat32);
  }
  EXPECT_THROW(Autocast(Precision::kAuto), std::invalid_argument);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(AutocastTest, NestedGuardsRestoreTheStateTheyFound) {
  const torch::Tensor a = torch::randn({4, 4});
  {
    Autocast outer(Precision::kBf16);
    {
      Autocast inner(Precision::kBf16);
      EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    }
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    {
      Autocast inner(Precision::kFp32);  // changes nothing: still the outer guard's bf16
      EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    }
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

// The masters stay float32: the forward's bf16 copies pass their gradients back to them.
TEST(AutocastTest, Float32WeightsGetFloat32GradientsCloseToFp32Ones) {
  torch::manual_seed(3);
  models::ModelSpec spec;
  spec.name = "convnet";
  spec.input_shape = {1, 28, 28};
  spec.num_classes = 10;
  auto model = models::makeModel(spec);
  const torch::Tensor inputs = torch::randn({16, 1, 28, 28});
  const torch::Tensor targets = torch::randint(10, {16}, torch::kLong);

  const auto lossOf = [&](Precision precision) {
    for (const torch::Tensor& p : model->parameters()) {
      if (p.grad().defined()) p.grad().zero_();
    }
    torch::Tensor outputs;
    {
      Autocast autocast(precision);
      outputs = model->forward(inputs);
    }
    EXPECT_EQ(outputs.scalar_type(),
              precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32);
    torch::Tensor loss = torch::cross_entropy_loss(outputs.to(torch::kFloat32), targets);
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : model->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat32);
      EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);
      grads.push_back(p.grad().clone());
    }
    return std::make_pair(loss.item<double>(), torch::cat(
        [&] {
          std::vector<torch::Tensor> flat;
          for (const auto& g : grads) flat.push_back(g.flatten());
          return flat;
        }()));
  };
  const auto [loss32, grad32] = lossOf(Precision::kFp32);
  const auto [loss16, grad16] = lossOf(Precision::kBf16);
  EXPECT_NE(loss16, loss32);  // bf16 really ran
  EXPECT_NEAR(loss16, loss32, 0.02 * loss32);
  const double relative = ((grad16 - grad32).norm() / grad32.norm()).item<double>();
  EXPECT_GT(relative, 0.0);
  EXPECT_LT(relative, 0.05);
}

}  // namespace
}  // namespace cumulus
