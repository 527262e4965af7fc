#pragma once
// The trainer's start-up checks (trainer.cc asks them while it builds): the batch sizes against
// the world, and a model against its data and loss, so that what does not fit fails before the
// first step, naming the model, the file and what to change, rather than inside a step with
// LibTorch's words. Each throws SetupError (trainer.h), or std::invalid_argument for a batch size
// the schema could not check. The model checks run the model in evaluation mode without
// gradients (no dropout draws, nothing learns) and leave it in training mode.

#include <cstdint>
#include <string>

#include "configs/experiment.h"
#include "cumulus/options.h"  // Precision

namespace cumulus::data {
class Examples;
struct Batch;
}  // namespace cumulus::data
namespace cumulus::models {
class Model;
}

namespace cumulus::trainer {

class Loss;
struct Datasets;

// trainer.grad_accumulation and eval.batch_size at least 1, and trainer.global_batch_size at
// least world_size x grad_accumulation (no empty micro-batch).
void checkBatchSizes(const configs::Experiment& config, int64_t world_size);

class ModelCheck {
 public:
  // `config` names the model (model.name) and the data format in the messages.
  ModelCheck(models::Model& model, const Loss& loss, Precision precision,
             const configs::Experiment& config);

  // At least one parameter requires a gradient (LibTorch's own complaint comes only at the first
  // backward, and says nothing of the model).
  void trainable() const;
  // The dry run: one sample of `train` (described as `source`) through the model and the loss;
  // for the IDX datasets the outputs must be logits of their ten classes. Under bf16, a failure
  // that fp32 does not have says so.
  void fitsData(const data::Examples& train, const std::string& source) const;
  // data.format tokens: for each stream, one window whose first input and target token is the
  // stream's largest id, and one with its smallest, so that an id the embedding rejects or the
  // outputs do not cover is named with its file.
  void tokenIds(const Datasets& data) const;

 private:
  void tryOneBatch(const data::Batch& batch, const std::string& source) const;
  // After a bf16 forward of `batch` failed: what to add to the error when fp32 runs it.
  std::string bf16Hint(const data::Batch& batch) const;

  models::Model& model_;
  const Loss& loss_;
  const Precision precision_;
  const configs::Experiment& config_;
};

}  // namespace cumulus::trainer
