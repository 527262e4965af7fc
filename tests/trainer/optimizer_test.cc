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
  c.name = configs::OptimizerName::kSgd;
  c.lr = 0.1;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 0.01;
  return c;
}

configs::OptimizerConfig adamwConfig() {
  configs::OptimizerConfig c;
  c.name = configs::OptimizerName::kAdamw;
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
  const checkpoint::OptimizerState state = opt->exportState();
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
        << base::nameOf(config.name) << " parameter " << i << "\n"
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
    const checkpoint::OptimizerState saved = first->exportState();
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
    EXPECT_TRUE(torch::equal(w, resumed_w)) << base::nameOf(config.name);
    // The export was a deep copy: later steps did not touch it.
    EXPECT_FALSE(
        torch::equal(saved.tensors.begin()->second, first->exportState().tensors.begin()->second))
        << base::nameOf(config.name);
  }
}

TEST(OptimizerTest, ImportRejectsForeignState) {
  const auto w = param({1, 2});
  auto sgd = makeOptimizer(sgdConfig(), {w});
  checkpoint::OptimizerState state{"adamw", 1, {}};
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
  // The index is read strictly: "0x" is not parameter 0, nor is " 0" or "+0".
  for (const char* key : {"0x.momentum_buffer", " 0.momentum_buffer", "+0.momentum_buffer"}) {
    state = {"sgd", 1, {{key, torch::zeros({2})}}};
    try {
      sgd->importState(state);
      ADD_FAILURE() << key << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("optimizer state: malformed key \"") + key + "\"");
    }
  }
}

// An unknown optimizer name never gets here: the config refuses it (ParseTest.OutOfRangeValues).
TEST(OptimizerTest, RejectsBadHyperParameters) {
  auto c = sgdConfig();
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

// Flat against per-tensor ------------------------------------------------------------------------

std::vector<torch::Tensor> oddShapes(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({37, 5}).requires_grad_(), torch::randn({1000}).requires_grad_(),
          torch::randn({3}).requires_grad_(), torch::randn({64, 33}).requires_grad_()};
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

// Takes `steps` steps with gradients and learning rates drawn from `seed`.
void train(Optimizer& opt, const std::vector<torch::Tensor>& params, int steps, uint64_t seed) {
  torch::manual_seed(seed);
  for (int s = 0; s < steps; ++s) {
    for (const auto& p : params) p.mutable_grad() = torch::randn(p.sizes());
    opt.step(0.01 * (1 + s % 3));
  }
}

int64_t differingElements(const std::vector<torch::Tensor>& a,
                          const std::vector<torch::Tensor>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += (a[i] != b[i]).sum().item<int64_t>();
  return n;
}

std::vector<configs::OptimizerConfig> allConfigs() {
  auto heavy = sgdConfig();
  heavy.nesterov = false;
  heavy.weight_decay = 0;
  auto plain = sgdConfig();
  plain.momentum = 0;
  plain.nesterov = false;
  auto adamw = adamwConfig();
  adamw.weight_decay = 0.05;
  return {sgdConfig(), heavy, plain, adamw};
}

// The same formulas in the same float32 order per element; LibTorch's vectorized add-with-alpha
// rounds once (an FMA) where the flat kernel rounds twice, so a few elements differ in the last
// bits. The test prints how many.
TEST(FlatOptimizerTest, MatchesThePerTensorImplementationOverSteps) {
  for (const auto& config : allConfigs()) {
    const auto flat_params = oddShapes(11);
    const auto reference_params = clones(flat_params);
    auto flat = makeOptimizer(config, flat_params);
    auto reference = makePerTensorOptimizer(config, reference_params);
    train(*flat, flat_params, 8, 12);
    train(*reference, reference_params, 8, 12);
    int64_t total = 0;
    for (size_t i = 0; i < flat_params.size(); ++i) {
      total += flat_params[i].numel();
      EXPECT_TRUE(torch::allclose(flat_params[i], reference_params[i], 1e-5, 1e-6))
          << base::nameOf(config.name) << " parameter " << i;
    }
    const checkpoint::OptimizerState a = flat->exportState();
    const checkpoint::OptimizerState b = reference->exportState();
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << base::nameOf(config.name);
    for (const auto& [key, tensor] : a.tensors) {
      EXPECT_TRUE(torch::allclose(tensor, b.tensors.at(key), 1e-5, 1e-6)) << key;
    }
    std::printf(
        "[ %s momentum %.1f nesterov %d ] elements whose bits differ from per-tensor "
        "after 8 steps: %lld of %lld\n",
        base::nameOf(config.name), config.momentum, config.nesterov ? 1 : 0,
        static_cast<long long>(differingElements(flat_params, reference_params)),
        static_cast<long long>(total));
  }
}

// One bucket on one thread against four buckets on two threads: bit-identical, parameters and
// state.
TEST(FlatOptimizerTest, ResultsDoNotDependOnTheLayoutOrTheThreadCount) {
  const int threads = torch::get_num_threads();
  for (const auto& config : allConfigs()) {
    const auto one = oddShapes(21);
    const auto many = clones(one);
    torch::set_num_threads(1);
    auto a = makeOptimizer(config, one);
    train(*a, one, 5, 22);
    torch::set_num_threads(2);
    auto flat = std::make_shared<distributed::FlatParameters>(
        many, distributed::layoutOf(many, 4096, 1024));
    ASSERT_GE(flat->buckets().size(), 3u);
    auto b = makeFlatOptimizer(config, flat);
    train(*b, many, 5, 22);
    EXPECT_EQ(differingElements(one, many), 0) << base::nameOf(config.name);
    for (const auto& [key, tensor] : a->exportState().tensors) {
      EXPECT_TRUE(torch::equal(tensor, b->exportState().tensors.at(key))) << key;
    }
  }
  torch::set_num_threads(threads);
}

// The state leaves as one tensor per parameter and slot, with torch.optim's names and the
// parameter's shape, and comes back bit for bit.
TEST(FlatOptimizerTest, ExportedStateHasPerParameterKeysAndImportsExactly) {
  for (const auto& config : {sgdConfig(), adamwConfig()}) {
    const auto params = oddShapes(31);
    auto opt = makeOptimizer(config, params);
    EXPECT_TRUE(opt->exportState().tensors.empty()) << "no state before the first step";
    train(*opt, params, 3, 32);
    const checkpoint::OptimizerState saved = opt->exportState();
    const std::vector<std::string> slots = config.name == configs::OptimizerName::kSgd
                                               ? std::vector<std::string>{"momentum_buffer"}
                                               : std::vector<std::string>{"exp_avg", "exp_avg_sq"};
    ASSERT_EQ(saved.tensors.size(), params.size() * slots.size());
    for (size_t i = 0; i < params.size(); ++i) {
      for (const auto& slot : slots) {
        const torch::Tensor& t = saved.tensors.at(std::to_string(i) + "." + slot);
        EXPECT_EQ(t.sizes(), params[i].sizes());
        EXPECT_TRUE(t.is_contiguous());
        EXPECT_EQ(t.storage().nbytes(), static_cast<size_t>(t.nbytes())) << "a copy, not a view";
      }
    }
    const auto other = clones(params);
    auto resumed = makeFlatOptimizer(config, std::make_shared<distributed::FlatParameters>(
                                                 other, distributed::layoutOf(other, 2048, 512)));
    resumed->importState(saved);
    EXPECT_EQ(resumed->stepCount(), 3);
    const checkpoint::OptimizerState again = resumed->exportState();
    ASSERT_EQ(again.tensors.size(), saved.tensors.size());
    for (const auto& [key, tensor] : saved.tensors) {
      EXPECT_TRUE(torch::equal(tensor, again.tensors.at(key))) << key;
    }
    train(*opt, params, 2, 33);
    train(*resumed, other, 2, 33);
    EXPECT_EQ(differingElements(params, other), 0) << base::nameOf(config.name);
  }
}

// An imported state that covers some parameters only: those continue, the others start afresh
// (SGD: their buffer becomes their first d), as in the per-tensor implementation.
TEST(FlatOptimizerTest, PartialStateContinuesLikeThePerTensorImplementation) {
  const auto params = oddShapes(41);
  const auto reference_params = clones(params);
  torch::manual_seed(42);
  checkpoint::OptimizerState state{
      "sgd",
      4,
      {{"1.momentum_buffer", torch::randn({1000})}, {"3.momentum_buffer", torch::randn({64, 33})}}};
  auto flat = makeOptimizer(sgdConfig(), params);
  auto reference = makePerTensorOptimizer(sgdConfig(), reference_params);
  flat->importState(state);
  reference->importState(state);
  EXPECT_EQ(flat->exportState().tensors.size(), 2u);
  train(*flat, params, 3, 43);
  train(*reference, reference_params, 3, 43);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i], reference_params[i], 1e-5, 1e-6)) << i;
  }
  EXPECT_EQ(flat->exportState().tensors.size(), 4u);
}

TEST(FlatOptimizerTest, ImportRejectsAnUnknownSlotAndChangesNothing) {
  const auto params = oddShapes(51);
  auto opt = makeOptimizer(adamwConfig(), params);
  train(*opt, params, 1, 52);
  const checkpoint::OptimizerState before = opt->exportState();
  checkpoint::OptimizerState state{
      "adamw", 9, {{"0.exp_avg", torch::zeros({37, 5})}, {"2.momentum_buffer", torch::zeros({3})}}};
  try {
    opt->importState(state);
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "optimizer state: \"2.momentum_buffer\" is not a slot of adamw");
  }
  EXPECT_EQ(opt->stepCount(), 1);
  for (const auto& [key, tensor] : opt->exportState().tensors) {
    EXPECT_TRUE(torch::equal(tensor, before.tensors.at(key))) << key;
  }
}

TEST(FlatOptimizerTest, ClipGradNormOverFlatGradientsMatchesThePerTensorOne) {
  const auto a = param({0, 0});
  const auto b = param({0});
  distributed::FlatParameters flat({a, b}, distributed::layoutOf({a, b}, 4, 4));
  flat.zeroGrads();
  a.grad().copy_(torch::tensor({3.0f, 4.0f}));
  b.grad().fill_(12.0f);
  EXPECT_EQ(clipGradNorm(flat, 20.0), 13.0);
  expectValues(a.grad(), {3, 4}, 0, "unclipped");
  EXPECT_EQ(clipGradNorm(flat, 6.5), 13.0);
  expectValues(a.grad(), {1.5, 2}, 1e-6, "clipped a");
  expectValues(b.grad(), {6}, 1e-6, "clipped b");
  // A replaced gradient is clipped where it is.
  b.mutable_grad() = torch::tensor({12.0f});
  EXPECT_NEAR(clipGradNorm(flat, 6.5), std::sqrt(1.5 * 1.5 + 2 * 2 + 144), 1e-5);
  EXPECT_LT(b.grad().item<float>(), 12.0f);
}

}  // namespace
}  // namespace cumulus::trainer
