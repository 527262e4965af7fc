#pragma once
// Helpers shared by the models tests: the fixture folder, the reference input that the Python
// scripts in models/fixtures also build, and raw float32 logits files.

#include <torch/types.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace cumulus::models::fixtures {

inline const std::string kFixtures = std::string(CUMULUS_SOURCE_DIR) + "/models/fixtures";

// Same as reference_input() in models/fixtures/make_tiny_scripted.py: no RNG, two images.
inline torch::Tensor referenceInput() {
  const torch::Tensor i = torch::arange(784, torch::kInt64);
  const torch::Tensor a = ((i * 37) % 101).to(torch::kFloat32) / 100.0;
  return torch::stack({a, a.flip(0)}).reshape({2, 1, 28, 28});
}

// `count` little-endian float32 values as a [2, count / 2] tensor; empty if the file is short.
inline torch::Tensor readLogits(const std::string& path, int64_t count = 20) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> values(static_cast<size_t>(count));
  in.read(reinterpret_cast<char*>(values.data()), count * 4);
  if (in.gcount() != count * 4) return {};
  return torch::tensor(values).reshape({2, count / 2});
}

}  // namespace cumulus::models::fixtures
