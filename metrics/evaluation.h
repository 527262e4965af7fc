#pragma once
// Evaluation: what one evaluation of the model on held-out data found, as the recorders write it
// (the "eval" record of metrics.jsonl, the TensorBoard series eval/*). No LibTorch here.

#include <optional>

namespace cumulus::metrics {

struct Evaluation {
  // The mean over the samples of each sample's mean loss; for a language model, nats per token.
  double loss = 0;
  // The share of predictions that are right (samples for class ids, tokens for a language model);
  // unset where accuracy means nothing (a regression loss, a model's own loss).
  std::optional<double> accuracy;
  // How long the evaluation took (the caller times it; an evaluator need not set it).
  double seconds = 0;
};

}  // namespace cumulus::metrics
