#include "trainer/evaluator.h"

#include <torch/torch.h>

#include <algorithm>

#include "data/examples.h"
#include "models/model.h"
#include "trainer/loss.h"
#include "trainer/rank_reduce.h"

namespace cumulus::trainer {
namespace {

class TestSetEvaluator final : public Evaluator {
 public:
  TestSetEvaluator(std::shared_ptr<const data::Examples> test,
                   const TestSetEvaluatorOptions& options)
      : test_(std::move(test)),
        options_(options),
        loss_(options.loss ? options.loss : std::make_shared<Loss>(Loss::named(Loss::Kind::kCrossEntropy))) {}

  bool due(int64_t steps_done) const override {
    return options_.every_steps > 0 ? steps_done % options_.every_steps == 0
                                    : steps_done % options_.steps_per_epoch == 0;
  }

  Evaluation evaluate(models::Model& model) override {
    const int64_t n = test_->size();
    const bool sharded = options_.group != nullptr && options_.world_size > 1;
    const int64_t shards = sharded ? options_.world_size : 1;
    const int64_t shard = sharded ? options_.rank : 0;
    const int64_t first = n * shard / shards;
    const int64_t last = n * (shard + 1) / shards;
    double loss_sum = 0;
    int64_t correct = 0;
    int64_t predictions = 0;
    for (int64_t begin = first; begin < last; begin += options_.batch_size) {
      const int64_t rows = std::min(options_.batch_size, last - begin);
      const LossResult result = loss_->apply(model, test_->slice(begin, rows), true);
      loss_sum += result.sum.item<double>();
      correct += result.correct;
      predictions += result.predictions;
    }
    if (sharded) {
      // Counts are integers far below 2^53, so the float64 sum is exact.
      double sums[3] = {loss_sum, static_cast<double>(correct), static_cast<double>(predictions)};
      sumOverRanks(options_.group, sums, 3);
      loss_sum = sums[0];
      correct = static_cast<int64_t>(sums[1]);
      predictions = static_cast<int64_t>(sums[2]);
    }
    Evaluation evaluation;
    evaluation.loss = loss_sum / static_cast<double>(n);
    if (loss_->hasAccuracy()) {
      evaluation.accuracy = static_cast<double>(correct) / static_cast<double>(predictions);
    }
    return evaluation;
  }

 private:
  std::shared_ptr<const data::Examples> test_;
  TestSetEvaluatorOptions options_;
  std::shared_ptr<const Loss> loss_;
};

}  // namespace

std::shared_ptr<Evaluator> makeTestSetEvaluator(std::shared_ptr<const data::Examples> test,
                                                const TestSetEvaluatorOptions& options) {
  return std::make_shared<TestSetEvaluator>(std::move(test), options);
}

}  // namespace cumulus::trainer
