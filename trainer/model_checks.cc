// The trainer's start-up checks of a model against its data and loss (model_checks.h).

#include "trainer/model_checks.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "data/examples.h"
#include "data/npy.h"  // TokenExamples
#include "models/model.h"
#include "trainer/datasets.h"
#include "trainer/loss.h"
#include "trainer/trainer.h"

namespace cumulus::trainer {
namespace {

// The IDX datasets (fashion-mnist, mnist, synthetic) all have ten classes.
constexpr int64_t kIdxClasses = 10;

// An error's text for a user: LibTorch's c10::Error without its C++ backtrace.
std::string reasonOf(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) {
    return torch_error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace

void checkBatchSizes(const configs::Experiment& config, int64_t world_size) {
  const auto& t = config.trainer;
  if (t.grad_accumulation < 1)
    throw std::invalid_argument("trainer.grad_accumulation: must be >= 1");
  if (config.eval.batch_size < 1) throw std::invalid_argument("eval.batch_size: must be >= 1");
  if (t.global_batch_size < world_size * t.grad_accumulation) {
    throw std::invalid_argument(
        "trainer.global_batch_size: " + std::to_string(t.global_batch_size) +
        " leaves some micro-batch empty; it must be >= world size x trainer.grad_accumulation = " +
        std::to_string(world_size * t.grad_accumulation));
  }
}

ModelCheck::ModelCheck(models::Model& model, const Loss& loss, Precision precision,
                       const configs::Experiment& config)
    : model_(model), loss_(loss), precision_(precision), config_(config) {}

void ModelCheck::trainable() const {
  const std::vector<torch::Tensor> params = model_.parameters();
  const bool any = std::any_of(params.begin(), params.end(),
                               [](const torch::Tensor& p) { return p.requires_grad(); });
  if (any) return;
  throw SetupError("model " + config_.model.name + " has no trainable parameters (" +
                   (params.empty() ? std::string("it has none")
                                   : std::to_string(params.size()) +
                                         " parameter tensors, none with requires_grad") +
                   "): there is nothing to train; give the module at least one "
                   "torch.nn.Parameter that requires a gradient");
}

void ModelCheck::fitsData(const data::Examples& train, const std::string& source) const {
  torch::NoGradGuard no_grad;
  model_.train(false);
  tryOneBatch(train.slice(0, 1), source);
  model_.train(true);
}

void ModelCheck::tryOneBatch(const data::Batch& batch, const std::string& source) const {
  const std::string sample = "one sample of " + source;
  const std::string failed = "model " + config_.model.name + " failed on " + sample + " (inputs " +
                             tensorText(batch.inputs) + "): ";
  if (loss_.kind() == Loss::Kind::kModule) {
    try {
      loss_.apply(model_, batch);
    } catch (const std::exception& e) {
      throw SetupError(failed + reasonOf(e) + bf16Hint(batch));
    }
    return;
  }
  torch::Tensor outputs;
  try {
    outputs = loss_.forward(model_, batch.inputs);
  } catch (const std::exception& e) {
    throw SetupError(failed + reasonOf(e) + bf16Hint(batch));
  }
  if (config_.data.format == configs::DataFormat::kIdx &&
      loss_.kind() == Loss::Kind::kCrossEntropy &&
      (outputs.dim() != 2 || outputs.size(1) != kIdxClasses)) {
    throw SetupError("model " + config_.model.name + " returns outputs " + tensorText(outputs) +
                     " for " + sample + "; the IDX datasets have " + std::to_string(kIdxClasses) +
                     " classes, so it must return logits [1, " + std::to_string(kIdxClasses) + "]");
  }
  try {
    loss_.sumOf(outputs, batch.targets);
  } catch (const std::exception& e) {
    throw SetupError(reasonOf(e) + " (model " + config_.model.name + ", " + sample + ")");
  }
}

std::string ModelCheck::bf16Hint(const data::Batch& batch) const {
  if (precision_ != Precision::kBf16) return "";
  try {
    Loss::named(loss_.kind(), Precision::kFp32).apply(model_, batch);
  } catch (const std::exception&) {
    return "";  // not the precision's doing
  }
  return "; the model runs in fp32, so that operation fails under LibTorch's bf16 autocast: set "
         "trainer.precision: fp32, or make the model accept bfloat16 there";
}

void ModelCheck::tokenIds(const Datasets& data) const {
  if (!data.train_tokens) return;
  torch::NoGradGuard no_grad;
  model_.train(false);
  const std::pair<const data::TokenExamples*, std::string> streams[] = {
      {data.train_tokens.get(), data.train_source}, {data.test_tokens.get(), data.test_source}};
  for (const auto& [tokens, source] : streams) {
    for (const int64_t id : {tokens->maxToken(), tokens->minToken()}) {
      data::Batch window = tokens->slice(0, 1);
      window.inputs.data_ptr<int64_t>()[0] = id;
      window.targets.data_ptr<int64_t>()[0] = id;
      const std::string token = "token id " + std::to_string(id) + " in " + source;
      if (loss_.kind() == Loss::Kind::kModule) {
        try {
          loss_.apply(model_, window);
        } catch (const std::exception& e) {
          throw SetupError(token + " is out of range for the model: " + reasonOf(e));
        }
        continue;
      }
      torch::Tensor outputs;
      try {
        outputs = loss_.forward(model_, window.inputs);
      } catch (const std::exception& e) {
        throw SetupError(token + " is out of range for the model's embedding: " + reasonOf(e));
      }
      if (loss_.kind() == Loss::Kind::kCrossEntropy && outputs.dim() == 3 &&
          outputs.size(2) <= id) {
        throw SetupError(token + " is beyond the model's outputs: logits " + tensorText(outputs) +
                         " score ids 0 to " + std::to_string(outputs.size(2) - 1));
      }
    }
  }
  model_.train(true);
}

}  // namespace cumulus::trainer
