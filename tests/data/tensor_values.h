#pragma once
// Test helper: a tensor's elements as a std::vector, to compare with EXPECT_EQ.

#include <torch/torch.h>

#include <vector>

namespace cumulus::data::testing {

template <typename T>
std::vector<T> values(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

}  // namespace cumulus::data::testing
