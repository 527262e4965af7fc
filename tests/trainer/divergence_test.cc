// divergenceMessage: the advice a non-finite loss gives names the optimizer that made it, from a
// real DiLoCo's state after a real outer step.
#include "trainer/divergence.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "configs/schema.h"
#include "cumulus/diloco.h"

namespace cumulus::trainer {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

configs::Experiment dilocoExperiment() {
  configs::Experiment e = configs::schemaDefaults();
  e.trainer.sync = configs::SyncMode::kDiloco;
  return e;
}

// Two tensors, a round every step, alone (no group): beginStep(1) is an outer step.
std::vector<torch::Tensor> parameters() { return {torch::ones({4}), torch::ones({2, 3})}; }

DiLoCoOptions roundEveryStep(double outer_lr) {
  DiLoCoOptions options;
  options.inner_steps = 1;
  options.outer_lr = outer_lr;
  options.outer_momentum = 0.9;
  return options;
}

TEST(DivergenceTest, EveryStepSyncNamesTheOptimizer) {
  EXPECT_EQ(divergenceMessage(configs::schemaDefaults(), 7, kNan, nullptr),
            "training diverged at step 7 (loss nan); lower optimizer.lr or set "
            "trainer.grad_clip_norm");
}

// What `--set diloco.outer_lr=1e308` did before the schema refused it (the API still takes any
// rate above 0): the averaged outer gradient is finite, the global parameters after the outer
// step are not. The advice used to be "lower optimizer.lr".
TEST(DivergenceTest, AnOuterStepThatMadeTheParametersNonFiniteNamesTheOuterOptimizer) {
  std::vector<torch::Tensor> params = parameters();
  DiLoCo diloco(params, roundEveryStep(1e308));
  for (torch::Tensor& p : params) p.sub_(0.25);  // an inner step, finite
  diloco.beginStep(1, nullptr);
  ASSERT_FALSE(torch::isfinite(params[0]).all().item<bool>());
  EXPECT_EQ(divergenceMessage(dilocoExperiment(), 2, kNan, &diloco),
            "training diverged at step 2 (loss nan) after DiLoCo's outer step made the global "
            "parameters non-finite; lower diloco.outer_lr (now 1.0e+308) or "
            "diloco.outer_momentum (now 0.9)");
}

// A replica that diverged in its inner steps sends a non-finite outer gradient, which the
// momentum keeps: both optimizers are named, the inner one first. So are they when the loss
// diverged between rounds, with nothing non-finite in the outer state.
TEST(DivergenceTest, UnderDilocoOtherwiseBothOptimizersAreNamedInnerFirst) {
  const std::string both =
      "; lower optimizer.lr or set trainer.grad_clip_norm for the inner steps, or lower "
      "diloco.outer_lr (now 0.7) or diloco.outer_momentum (now 0.9) for the outer ones";
  std::vector<torch::Tensor> params = parameters();
  DiLoCo diloco(params, roundEveryStep(0.7));
  EXPECT_EQ(divergenceMessage(dilocoExperiment(), 1, kInf, &diloco),
            "training diverged at step 1 (loss inf)" + both);
  params[0].fill_(kInf);  // the inner optimizer's step overflowed
  diloco.beginStep(1, nullptr);
  EXPECT_EQ(divergenceMessage(dilocoExperiment(), 2, kNan, &diloco),
            "training diverged at step 2 (loss nan)" + both);
}

}  // namespace
}  // namespace cumulus::trainer
