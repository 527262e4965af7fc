#pragma once
// In-memory labelled datasets and the loaders that make them.
// Errors in input files throw DataError naming the file and what is wrong.

#include <torch/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace cumulus::data {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// images: float32 [N, C, H, W] (already scaled to [0, 1], normalized if asked); labels: int64 [N].
struct TensorDataset {
  torch::Tensor images;
  torch::Tensor labels;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

enum class Split { kTrain, kTest };

// Reads one IDX file (gzip if it ends in .gz or starts with the gzip magic, else raw). Validates
// the magic number, the dtype code, the dimensions and the exact file size. Returns a uint8 tensor
// shaped as the file says.
torch::Tensor readIdx(const std::string& path);

// MNIST-layout files in `dir`: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
// Checks that the image and label counts agree and labels are < 10.
TensorDataset loadMnistLike(const std::string& dir, Split split);

// A seeded, learnable synthetic dataset: class-dependent patterns plus noise, [n, 1, 28, 28].
// The same (n, seed) always gives bit-identical tensors.
TensorDataset makeSynthetic(int64_t n, uint64_t seed, int64_t num_classes = 10);

struct Normalization {
  double mean = 0.0;
  double std = 1.0;
};
Normalization computeNormalization(const TensorDataset& train);
void applyNormalization(TensorDataset& dataset, const Normalization& norm);

// Rows `indices` of the dataset, as contiguous tensors.
struct Batch {
  torch::Tensor images;
  torch::Tensor labels;
};
Batch gather(const TensorDataset& dataset, const std::vector<int64_t>& indices);

}  // namespace cumulus::data
