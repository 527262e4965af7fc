#pragma once
// Internal to cumulus_models: the factories behind makeModel, one per family, so that the
// registry's translation unit does not need the heavy <torch/nn.h> or <torch/script.h>.

#include "models/model.h"

#include <cstdint>
#include <memory>
#include <string>

namespace cumulus::models {

// Throw std::invalid_argument on a spec they cannot build (bad shapes, widths, dropout).
std::unique_ptr<Model> makeMlp(const ModelSpec& spec);
std::unique_ptr<Model> makeConvnet(const ModelSpec& spec);
// Throws std::invalid_argument naming `path` and torch's reason if it cannot be loaded.
std::unique_ptr<Model> loadTorchScript(const std::string& path);

// 3274634 -> "3,274,634".
std::string groupThousands(int64_t n);

}  // namespace cumulus::models
