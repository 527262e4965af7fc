// The default Evaluator (makeTestSetEvaluator): when it is due, and that its batched sums are the
// loss and accuracy over the whole test split.
#include "trainer/evaluator.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/dataset.h"
#include "models/model.h"

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
  const Evaluation result = makeTestSetEvaluator(data::inMemory(test, "test"), options)->evaluate(*model);
  EXPECT_NEAR(result.loss, loss, 1e-6);
  EXPECT_EQ(result.accuracy, std::optional<double>(accuracy));
}

}  // namespace
}  // namespace cumulus::trainer
