// divergenceMessage (divergence.h): what a non-finite loss says, and whom it blames.
#include "trainer/divergence.h"

#include <torch/types.h>

#include <vector>

#include "configs/schema.h"
#include "cumulus/diloco.h"

namespace cumulus::trainer {
namespace {

bool allFinite(const std::vector<torch::Tensor>& tensors) {
  for (const torch::Tensor& t : tensors) {
    if (!torch::isfinite(t).all().item<bool>()) return false;
  }
  return true;
}

}  // namespace

std::string divergenceMessage(const configs::Experiment& config, int64_t step, double loss,
                              const DiLoCo* diloco) {
  const std::string what =
      "training diverged at step " + std::to_string(step) + " (loss " + std::to_string(loss) + ")";
  const std::string inner = "lower optimizer.lr or set trainer.grad_clip_norm";
  if (diloco == nullptr) return what + "; " + inner;
  const std::string outer = "lower diloco.outer_lr (now " +
                            configs::formatNumber(diloco->outerLr()) +
                            ") or diloco.outer_momentum (now " +
                            configs::formatNumber(config.diloco.outer_momentum) + ")";
  const DiLoCoState state = diloco->state();
  if (!allFinite(state.global) && allFinite(state.momentum)) {
    return what + " after DiLoCo's outer step made the global parameters non-finite; " + outer;
  }
  return what + "; " + inner + " for the inner steps, or " + outer + " for the outer ones";
}

}  // namespace cumulus::trainer
