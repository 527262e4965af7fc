#pragma once
// Evaluator: the step loop's part that measures the model on held-out data. No LibTorch here.
//
// Contract with the step loop (trainer.h): after each step it asks due(steps_done), on every rank
// (the answers must agree: evaluate() may be a collective); it evaluates when that is true and
// always after the run's last step. Around evaluate() the loop puts the model in evaluation mode
// (no dropout) with gradients off, and back in training mode after. evaluate() returns the same
// Evaluation on every rank. Called from the training thread only; exceptions end run().

#include <cstdint>
#include <memory>
#include <optional>

#include "metrics/evaluation.h"

namespace cumulus {
class ProcessGroup;
}
namespace cumulus::data {
class Examples;
}
namespace cumulus::models {
class Model;
}

namespace cumulus::trainer {

class Loss;

using metrics::Evaluation;  // metrics/evaluation.h

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Whether to evaluate after `steps_done` (>= 1) completed steps.
  virtual bool due(int64_t steps_done) const = 0;
  virtual Evaluation evaluate(models::Model& model) = 0;
};

// The default: the experiment's loss (and accuracy, where the loss has one) over the whole test
// split, eval.batch_size rows at a time, every `every_steps` steps, or at each epoch's end when
// that is 0. In a group (`group` set, of more than one rank) rank r of w evaluates the contiguous
// slice [n·r/w, n·(r+1)/w) and the loss sums and correct counts are all-reduced (a fixed tree, so
// bit-identical from run to run); without one, this rank evaluates everything.
struct TestSetEvaluatorOptions {
  int64_t batch_size = 1;                  // eval.batch_size, >= 1
  int64_t every_steps = 0;                 // eval.every_steps; 0: at each epoch's end
  int64_t steps_per_epoch = 1;             // >= 1
  cumulus::ProcessGroup* group = nullptr;  // not owned; outlives the evaluator
  int64_t rank = 0;
  int64_t world_size = 1;
  std::shared_ptr<const Loss> loss;  // null: cross_entropy
};
// Defined in a LibTorch TU.
std::shared_ptr<Evaluator> makeTestSetEvaluator(std::shared_ptr<const data::Examples> test,
                                                const TestSetEvaluatorOptions& options);

}  // namespace cumulus::trainer
