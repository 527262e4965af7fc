// Loss (trainer/loss.h): known values for each kind, the per-sample sums the training loop
// divides by the global batch, accuracy counts, and the messages for outputs that do not fit.
#include "trainer/loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "models/model.h"

namespace cumulus::trainer {
namespace {

// A model whose forward returns fixed outputs, and whose forwardLoss returns a fixed loss.
class FixedModel : public models::Model {
 public:
  explicit FixedModel(torch::Tensor outputs, torch::Tensor loss = {})
      : outputs_(std::move(outputs)), loss_(std::move(loss)) {}
  torch::Tensor forward(const torch::Tensor&) override { return outputs_; }
  torch::Tensor forwardLoss(const torch::Tensor&, const torch::Tensor&) override {
    if (!loss_.defined()) return Model::forwardLoss(outputs_, outputs_);
    return loss_;
  }
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override { return {}; }
  std::vector<std::pair<std::string, torch::Tensor>> namedBuffers() override { return {}; }
  void train(bool) override {}
  std::string summary() override { return "fixed"; }

 private:
  torch::Tensor outputs_;
  torch::Tensor loss_;
};

std::string errorOf(const Loss& loss, const torch::Tensor& outputs, const torch::Tensor& targets) {
  try {
    loss.sumOf(outputs, targets);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LossTest, CrossEntropyOverClassesIsTheSummedNegativeLogLikelihood) {
  // Sample 0: logits (0, ln 3) -> p(class 1) = 3/4. Sample 1: (ln 4, 0, 0) -> p(class 0) = 4/6.
  const torch::Tensor logits =
      torch::tensor({{0.0, std::log(3.0), -1e9}, {std::log(4.0), 0.0, 0.0}}, torch::kFloat64);
  const torch::Tensor targets = torch::tensor({1, 0}, torch::kInt64);
  const Loss loss = Loss::named(Loss::Kind::kCrossEntropy);
  EXPECT_NEAR(loss.sumOf(logits, targets).item<double>(), -std::log(0.75) - std::log(4.0 / 6.0),
              1e-12);
  EXPECT_TRUE(loss.hasAccuracy());

  FixedModel model(logits);
  const LossResult counted = loss.apply(model, {torch::zeros({2, 1}), targets}, true);
  EXPECT_EQ(counted.correct, 2);
  EXPECT_EQ(counted.predictions, 2);
  const LossResult wrong =
      loss.apply(model, {torch::zeros({2, 1}), torch::tensor({0, 2}, torch::kInt64)}, true);
  EXPECT_EQ(wrong.correct, 0);
  EXPECT_EQ(wrong.predictions, 2);
  EXPECT_EQ(loss.apply(model, {torch::zeros({2, 1}), targets}).predictions, 0);  // not asked
}

TEST(LossTest, CrossEntropyOverTokensIsEachSamplesMeanSummed) {
  torch::manual_seed(3);
  const int64_t b = 3, t = 5, v = 7;
  const torch::Tensor logits = torch::randn({b, t, v}, torch::kFloat64);
  const torch::Tensor tokens = torch::randint(v, {b, t}, torch::kInt64);
  const Loss loss = Loss::named(Loss::Kind::kCrossEntropy);
  // The mean over every token of the batch, times the samples: each sample has T tokens.
  const double flat =
      torch::nn::functional::cross_entropy(logits.reshape({b * t, v}), tokens.reshape({b * t}))
          .item<double>();
  EXPECT_NEAR(loss.sumOf(logits, tokens).item<double>(), flat * b, 1e-12);
  // And sample by sample.
  double sum = 0;
  for (int64_t i = 0; i < b; ++i) {
    sum += torch::nn::functional::cross_entropy(logits[i], tokens[i]).item<double>();
  }
  EXPECT_NEAR(loss.sumOf(logits, tokens).item<double>(), sum, 1e-12);

  // Token accuracy: the arg-max of each position against its token.
  FixedModel model(logits);
  const LossResult counted = loss.apply(model, {torch::zeros({b, t}), tokens}, true);
  EXPECT_EQ(counted.predictions, b * t);
  EXPECT_EQ(counted.correct, logits.argmax(2).eq(tokens).sum().item<int64_t>());
}

TEST(LossTest, MseIsEachSamplesMeanSquaredErrorSummed) {
  const torch::Tensor outputs = torch::tensor({{1.0, 2.0}, {0.0, 0.0}}, torch::kFloat64);
  const torch::Tensor targets = torch::tensor({{0.0, 0.0}, {3.0, 1.0}}, torch::kFloat64);
  const Loss loss = Loss::named(Loss::Kind::kMse);
  // (1 + 4) / 2 + (9 + 1) / 2 = 7.5
  EXPECT_DOUBLE_EQ(loss.sumOf(outputs, targets).item<double>(), 7.5);
  // Integer targets are compared as the outputs' dtype.
  EXPECT_DOUBLE_EQ(
      loss.sumOf(outputs, torch::tensor({{0, 0}, {3, 1}}, torch::kInt64)).item<double>(), 7.5);
  // One value a sample, [B]: the squared errors summed.
  EXPECT_DOUBLE_EQ(loss.sumOf(torch::tensor({1.0, -1.0}), torch::tensor({0.0, 1.0})).item<double>(),
                   5.0);
  EXPECT_FALSE(loss.hasAccuracy());
  FixedModel model(outputs);
  const LossResult counted = loss.apply(model, {torch::zeros({2, 1}), targets}, true);
  EXPECT_EQ(counted.predictions, 0);
}

TEST(LossTest, ModuleLossIsTheModelsMeanTimesTheSamples) {
  const Loss loss = Loss::named(Loss::Kind::kModule);
  FixedModel model(torch::zeros({4, 1}), torch::tensor(0.25, torch::kFloat64));
  const LossResult result =
      loss.apply(model, {torch::zeros({4, 3}), torch::zeros({4, 1})}, /*count_correct=*/true);
  EXPECT_DOUBLE_EQ(result.sum.item<double>(), 1.0);
  EXPECT_EQ(result.predictions, 0);
  EXPECT_FALSE(loss.hasAccuracy());
  EXPECT_THROW(loss.sumOf(torch::zeros({1}), torch::zeros({1})), std::logic_error);

  // The built-in models have no loss of their own.
  FixedModel builtin(torch::zeros({4, 1}));
  try {
    loss.apply(builtin, {torch::zeros({4, 3}), torch::zeros({4, 1})});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "loss.name module: the built-in models (mlp, convnet) have no forward(inputs, "
                 "targets) that returns a loss; use loss.name cross_entropy or mse, or a "
                 "torchscript: model");
  }
}

TEST(LossTest, ShapesAndDtypesThatDoNotFitNameTheLossAndTheShapes) {
  const Loss ce = Loss::named(Loss::Kind::kCrossEntropy);
  EXPECT_EQ(errorOf(ce, torch::zeros({8, 10}), torch::zeros({8, 3}, torch::kInt64)),
            "loss.name cross_entropy: outputs [8, 10] and targets [8, 3] do not match; "
            "cross_entropy wants [B, C] with targets [B], or [B, T, V] with [B, T]");
  EXPECT_EQ(errorOf(ce, torch::zeros({8, 10}), torch::zeros({4}, torch::kInt64)),
            "loss.name cross_entropy: outputs [8, 10] and targets [4] do not match; "
            "cross_entropy wants [B, C] with targets [B], or [B, T, V] with [B, T]");
  EXPECT_EQ(errorOf(ce, torch::zeros({2, 5, 7}), torch::zeros({2, 4}, torch::kInt64)),
            "loss.name cross_entropy: outputs [2, 5, 7] and targets [2, 4] do not match; "
            "cross_entropy wants [B, C] with targets [B], or [B, T, V] with [B, T]");
  EXPECT_EQ(errorOf(ce, torch::zeros({8, 10}), torch::zeros({8})),
            "loss.name cross_entropy: targets [8] are float32; cross_entropy wants integer class "
            "or token ids");
  const Loss mse = Loss::named(Loss::Kind::kMse);
  EXPECT_EQ(errorOf(mse, torch::zeros({8, 1}), torch::zeros({8})),
            "loss.name mse: outputs [8, 1] and targets [8] do not match; mse wants outputs and "
            "targets of one shape [B, ...]");
  EXPECT_EQ(errorOf(mse, torch::zeros({8}, torch::kInt64), torch::zeros({8})),
            "loss.name mse: outputs [8] are int64; mse wants floating-point outputs");
  EXPECT_EQ(mse.name(), "mse");
  EXPECT_EQ(tensorText(torch::zeros({1, 13})), "float32 [1, 13]");
  EXPECT_EQ(tensorText(torch::zeros({2}, torch::kUInt8)), "uint8 [2]");
}

// The training loop divides each micro-batch's sum by the global batch; for cross_entropy over
// classes that is the very tensor the trainer computed before losses were configurable, so
// existing runs keep their bits.
TEST(LossTest, ClassCrossEntropySumIsBitIdenticalToTheSummedReduction) {
  torch::manual_seed(9);
  const torch::Tensor logits = torch::randn({64, 10});
  const torch::Tensor targets = torch::randint(10, {64}, torch::kInt64);
  const torch::Tensor expected = torch::nn::functional::cross_entropy(
      logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  EXPECT_TRUE(Loss::named(Loss::Kind::kCrossEntropy).sumOf(logits, targets).equal(expected));
}

}  // namespace
}  // namespace cumulus::trainer
