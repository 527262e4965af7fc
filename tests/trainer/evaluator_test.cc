// The default Evaluator (makeTestSetEvaluator): when it is due, and that its batched sums are the
// loss and accuracy over the whole test split.
#include "trainer/evaluator.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/dataset.h"
#include "models/model.h"
#include "trainer/loss.h"

namespace cumulus::trainer {
namespace {

TEST(EvaluatorTest, DueEveryNStepsOrAtEachEpochsEnd) {
  data::TensorDataset none;
  TestSetEvaluatorOptions options;
  options.steps_per_epoch = 8;
  const auto at_epochs = makeTestSetEvaluator(data::inMemory(none, "none"), options);
  options.every_steps = 5;
  const auto every5 = makeTestSetEvaluator(data::inMemory(none, "none"), options);
  std::vector<int64_t> epochs, fives;
  for (int64_t step = 1; step <= 20; ++step) {
    if (at_epochs->due(step)) epochs.push_back(step);
    if (every5->due(step)) fives.push_back(step);
  }
  EXPECT_EQ(epochs, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(fives, (std::vector<int64_t>{5, 10, 15, 20}));
}

TEST(EvaluatorTest, BatchesAddUpToTheWholeTestSplit) {
  torch::manual_seed(5);
  const data::TensorDataset test = data::makeSynthetic(23, /*seed=*/9);
  models::ModelSpec spec;
  spec.hidden = {8};
  const std::unique_ptr<models::Model> model = models::makeModel(spec);
  torch::NoGradGuard no_grad;
  model->train(false);
  // The answer in one piece.
  const torch::Tensor logits = model->forward(test.inputs);
  const double loss = torch::nn::functional::cross_entropy(logits, test.targets).item<double>();
  const double accuracy =
      logits.argmax(1).eq(test.targets).to(torch::kFloat64).mean().item<double>();

  TestSetEvaluatorOptions options;
  options.batch_size = 5;  // 5 + 5 + 5 + 5 + 3 rows
  const Evaluation result =
      makeTestSetEvaluator(data::inMemory(test, "test"), options)->evaluate(*model);
  EXPECT_NEAR(result.loss, loss, 1e-6);
  EXPECT_EQ(result.accuracy, std::optional<double>(accuracy));
}

// loss.name mse: the mean of the per-sample mean squared errors, and no accuracy.
TEST(EvaluatorTest, MseReportsTheMeanPerSampleErrorAndNoAccuracy) {
  // An mlp with no hidden layer, its weights zero and bias one: every output is [1, 1].
  models::ModelSpec spec;
  spec.hidden = {};
  spec.input_shape = {3};
  spec.num_classes = 2;
  const std::unique_ptr<models::Model> model = models::makeModel(spec);
  for (auto& [name, p] : model->namedParameters()) {
    torch::NoGradGuard no_grad;
    p.fill_(name.find("bias") != std::string::npos ? 1.0 : 0.0);
  }
  // Targets (0, 0), (1, 3), (1, 1), (3, 1): squared errors per sample (1+1)/2, (0+4)/2, 0, 2.
  data::TensorDataset test{torch::zeros({4, 3}),
                           torch::tensor({{0.f, 0.f}, {1.f, 3.f}, {1.f, 1.f}, {3.f, 1.f}})};
  TestSetEvaluatorOptions options;
  options.batch_size = 3;
  options.loss = std::make_shared<Loss>(Loss::named(Loss::Kind::kMse));
  torch::NoGradGuard no_grad;
  const Evaluation result =
      makeTestSetEvaluator(data::inMemory(test, "test"), options)->evaluate(*model);
  EXPECT_DOUBLE_EQ(result.loss, (1.0 + 2.0 + 0.0 + 2.0) / 4);
  EXPECT_FALSE(result.accuracy.has_value());
}

}  // namespace
}  // namespace cumulus::trainer
