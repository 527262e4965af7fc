#include "trainer/optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace cumulus::trainer {
namespace {

torch::Tensor param(std::vector<float> values) {
  return torch::tensor(values, torch::kFloat).requires_grad_(true);
}

void setGrad(const torch::Tensor& p, std::vector<float> values) {
  p.mutable_grad() = torch::tensor(values, torch::kFloat);
}

void expectValues(const torch::Tensor& t, std::vector<double> expected, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size())) << what;
  const auto actual = t.detach().to(torch::kDouble).contiguous();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i].item<double>(), expected[i], tolerance) << what << " index " << i;
  }
}

configs::OptimizerConfig sgdConfig() {
  configs::OptimizerConfig c;
  c.name = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 0.01;
  return c;
}

configs::OptimizerConfig adamwConfig() {
  configs::OptimizerConfig c;
  c.name = "adamw";
  c.lr = 0.1;
  c.weight_decay = 0.01;
  return c;
}

// SGD, Nesterov, momentum 0.9, weight decay 0.01, lr 0.1, w0 = [1, -2], g = [0.5, 0.25] each step.
//   step 1: d = g + 0.01 w = [0.51, 0.23]; buf = d = [0.51, 0.23];
//           d + 0.9 buf = [0.969, 0.437]; w = w - 0.1 * that = [0.9031, -2.0437]
//   step 2: d = [0.509031, 0.229563]; buf = 0.9 [0.51, 0.23] + d = [0.968031, 0.436563];
//           d + 0.9 buf = [1.3802589, 0.6224697]; w = [0.76507411, -2.10594697]
//   step 3: d = [0.5076507411, 0.2289405303]; buf = [1.3788786411, 0.6218472303];
//           d + 0.9 buf = [1.74864151809, 0.78860303757]; w = [0.590209958, -2.184807274]
TEST(OptimizerTest, SgdNesterovMatchesHandComputedSteps) {
  const auto w = param({1, -2});
  auto opt = makeOptimizer(sgdConfig(), {w});
  const std::vector<std::vector<double>> expected = {
      {0.9031, -2.0437}, {0.76507411, -2.10594697}, {0.590209958, -2.184807274}};
  for (size_t s = 0; s < expected.size(); ++s) {
    setGrad(w, {0.5, 0.25});
    opt->step(0.1);
    expectValues(w, expected[s], 1e-6, "step " + std::to_string(s + 1));
  }
  EXPECT_EQ(opt->stepCount(), 3);
  expectValues(opt->exportState().tensors.at("0.momentum_buffer"), {1.3788786411, 0.6218472303},
               1e-6, "momentum buffer");
}

// Plain momentum (no Nesterov, no decay), lr 0.5, w0 = [2], g = [1] each step:
//   buf = 1, 1.9, 2.71; w = 2 - 0.5, 1.5 - 0.95, 0.55 - 1.355 = 1.5, 0.55, -0.805
TEST(OptimizerTest, SgdHeavyBallMatchesHandComputedSteps) {
  auto config = sgdConfig();
  config.nesterov = false;
  config.weight_decay = 0;
  const auto w = param({2});
  auto opt = makeOptimizer(config, {w});
  for (double expected : {1.5, 0.55, -0.805}) {
    setGrad(w, {1});
    opt->step(0.5);
    expectValues(w, {expected}, 1e-6, "heavy ball");
  }
}

// AdamW, lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, w0 = [1, -2],
// g1 = [0.5, 0.25], g2 = [-0.3, 0.1], g3 = [0.2, -0.4].
//   step 1: w *= 0.999 -> [0.999, -1.998]; m = [0.05, 0.025]; v = [2.5e-4, 6.25e-5];
//           m^ = m / 0.1 = [0.5, 0.25]; sqrt(v^) = sqrt(v / 0.001) = [0.5, 0.25];
//           w -= 0.1 * m^ / (sqrt(v^) + eps) -> [0.899, -2.098]
//   step 2: w *= 0.999 -> [0.898101, -2.095902]; m = [0.015, 0.0325]; v = [3.3975e-4, 7.24375e-5];
//           m^ = m / 0.19 = [0.0789474, 0.1710526]; sqrt(v^) = sqrt(v / 0.001999) =
//           [0.4122620, 0.1903598]; w -= 0.1 * m^ / sqrt(v^) -> [0.8789512, -2.1857595]
//   step 3: w *= 0.999; m = [0.0335, -0.01075]; v = [3.7941025e-4, 2.3236506e-4];
//           m^ = m / 0.271 = [0.1236162, -0.0396679]; sqrt(v^) = [0.3558042, 0.2784466];
//           w -> [0.8433295, -2.1693276]
TEST(OptimizerTest, AdamWMatchesHandComputedSteps) {
  const auto w = param({1, -2});
  auto opt = makeOptimizer(adamwConfig(), {w});
  const std::vector<std::vector<float>> grads = {{0.5, 0.25}, {-0.3, 0.1}, {0.2, -0.4}};
  const std::vector<std::vector<double>> expected = {
      {0.899000002, -2.097999996}, {0.878951199, -2.185759512}, {0.843329480, -2.169327613}};
  for (size_t s = 0; s < grads.size(); ++s) {
    setGrad(w, grads[s]);
    opt->step(0.1);
    expectValues(w, expected[s], 1e-6, "step " + std::to_string(s + 1));
  }
  const OptimizerState state = opt->exportState();
  EXPECT_EQ(state.step, 3);
  expectValues(state.tensors.at("0.exp_avg"), {0.0335, -0.01075}, 1e-7, "exp_avg");
  expectValues(state.tensors.at("0.exp_avg_sq"), {3.7941025e-4, 2.3236506e-4}, 1e-9, "exp_avg_sq");
}

// An independent implementation: LibTorch's own torch::optim, on a random problem of several
// parameters, for 5 steps with changing gradients.
template <typename TorchOptimizer, typename TorchOptions>
void compareWithTorch(const configs::OptimizerConfig& config, TorchOptions options) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> ours = {torch::randn({3, 4}).requires_grad_(),
                                     torch::randn({4}).requires_grad_()};
  std::vector<torch::Tensor> theirs;
  for (const auto& p : ours) theirs.push_back(p.detach().clone().requires_grad_());
  auto opt = makeOptimizer(config, ours);
  TorchOptimizer reference(theirs, options);
  for (int s = 0; s < 5; ++s) {
    for (size_t i = 0; i < ours.size(); ++i) {
      const auto g = torch::randn(ours[i].sizes());
      ours[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    opt->step(config.lr);
    reference.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ours[i], theirs[i], 1e-6, 1e-6))
        << config.name << " parameter " << i << "\n"
        << ours[i] << "\n"
        << theirs[i];
  }
}

TEST(OptimizerTest, SgdAgreesWithTorchOptim) {
  const auto c = sgdConfig();
  compareWithTorch<torch::optim::SGD>(c, torch::optim::SGDOptions(c.lr)
                                             .momentum(c.momentum)
                                             .nesterov(true)
                                             .weight_decay(c.weight_decay));
}

TEST(OptimizerTest, AdamWAgreesWithTorchOptim) {
  auto c = adamwConfig();
  c.lr = 0.01;
  c.weight_decay = 0.05;
  compareWithTorch<torch::optim::AdamW>(c, torch::optim::AdamWOptions(c.lr)
                                               .betas({c.beta1, c.beta2})
                                               .eps(c.eps)
                                               .weight_decay(c.weight_decay));
}

// Exact resume: three steps, export, two more steps; a fresh optimizer that imports the state
// and takes the same two steps lands on bit-identical parameters.
TEST(OptimizerTest, ImportedStateResumesBitExactly) {
  for (const auto& config : {sgdConfig(), adamwConfig()}) {
    torch::manual_seed(3);
    const auto w = torch::randn({5}).requires_grad_();
    std::vector<torch::Tensor> grads;
    for (int s = 0; s < 5; ++s) grads.push_back(torch::randn({5}));
    auto first = makeOptimizer(config, {w});
    for (int s = 0; s < 3; ++s) {
      w.mutable_grad() = grads[s].clone();
      first->step(0.05);
    }
    const OptimizerState saved = first->exportState();
    const auto resumed_w = w.detach().clone().requires_grad_();
    for (int s = 3; s < 5; ++s) {
      w.mutable_grad() = grads[s].clone();
      first->step(0.05);
    }
    auto second = makeOptimizer(config, {resumed_w});
    second->importState(saved);
    EXPECT_EQ(second->stepCount(), 3);
    for (int s = 3; s < 5; ++s) {
      resumed_w.mutable_grad() = grads[s].clone();
      second->step(0.05);
    }
    EXPECT_TRUE(torch::equal(w, resumed_w)) << config.name;
    // The export was a deep copy: later steps did not touch it.
    EXPECT_FALSE(
        torch::equal(saved.tensors.begin()->second, first->exportState().tensors.begin()->second))
        << config.name;
  }
}

TEST(OptimizerTest, ImportRejectsForeignState) {
  const auto w = param({1, 2});
  auto sgd = makeOptimizer(sgdConfig(), {w});
  OptimizerState state{"adamw", 1, {}};
  try {
    sgd->importState(state);
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "optimizer state is for \"adamw\", not \"sgd\"");
  }
  state = {"sgd", 1, {{"1.momentum_buffer", torch::zeros({2})}}};
  EXPECT_THROW(sgd->importState(state), std::invalid_argument);  // no parameter 1
  state = {"sgd", 1, {{"0.momentum_buffer", torch::zeros({3})}}};
  EXPECT_THROW(sgd->importState(state), std::invalid_argument);  // wrong shape
}

TEST(OptimizerTest, RejectsUnknownNamesAndBadHyperParameters) {
  auto c = sgdConfig();
  c.name = "lamb";
  try {
    makeOptimizer(c, {});
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "optimizer.name: unknown optimizer \"lamb\" (known: sgd, adamw)");
  }
  c = sgdConfig();
  c.momentum = 0;  // Nesterov without momentum
  EXPECT_THROW(makeOptimizer(c, {}), std::invalid_argument);
  c = adamwConfig();
  c.beta2 = 1.0;
  EXPECT_THROW(makeOptimizer(c, {}), std::invalid_argument);
}

TEST(OptimizerTest, StepWithoutGradientIsAnError) {
  const auto w = param({1});
  auto opt = makeOptimizer(sgdConfig(), {w});
  EXPECT_THROW(opt->step(0.1), std::logic_error);
}

// Gradients [3, 4] and [12]: global norm sqrt(9 + 16 + 144) = 13. Clipping to 6.5 halves them
// (scale 6.5 / (13 + 1e-6)); clipping to 20 leaves them alone.
TEST(OptimizerTest, ClipGradNormScalesByTheGlobalNorm) {
  const auto a = param({0, 0});
  const auto b = param({0});
  setGrad(a, {3, 4});
  setGrad(b, {12});
  EXPECT_NEAR(clipGradNorm({a, b}, 20.0), 13.0, 1e-9);
  expectValues(a.grad(), {3, 4}, 0, "unclipped");
  EXPECT_NEAR(clipGradNorm({a, b}, 6.5), 13.0, 1e-9);
  expectValues(a.grad(), {1.5, 2}, 1e-6, "clipped a");
  expectValues(b.grad(), {6}, 1e-6, "clipped b");
  const double norm_after = std::sqrt(1.5 * 1.5 + 2 * 2 + 6 * 6);
  EXPECT_NEAR(clipGradNorm({a, b}, 100.0), norm_after, 1e-5);
}

}  // namespace
}  // namespace cumulus::trainer
