#pragma once
// In-memory labelled datasets and the loaders that make them.
// Errors in input files throw DataError naming the file and what is wrong.
// No global state: every function is safe to call from several threads on distinct datasets.
// The loaders block on file I/O (a local disk; no timeout applies). Nothing here touches torch's
// global random generator.

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/error.h"
#include "data/examples.h"

namespace cumulus::data {

// Samples held in memory. For the image sets: inputs float32 [N, C, H, W] (already scaled to
// [0, 1], normalized if asked) and targets int64 [N] (class ids).
struct TensorDataset {
  torch::Tensor inputs;
  torch::Tensor targets;
  int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

enum class Split { kTrain, kTest };

// Reads one IDX file (gzip if it starts with the gzip magic 1f 8b, whatever its name, else raw;
// MNIST's files are sometimes stored gunzipped under a .gz name). Validates
// the magic number, the dtype code, the dimensions and the exact file size. Returns a uint8 tensor
// shaped as the file says. Only dtype 0x08 (uint8) and 1 to 4 dimensions are accepted, and at most
// 4 GiB of data; the tensor is allocated only after the payload is known to match the header.
//
// With a `cache_dir`, a gzip file's decompressed bytes are kept there (made if missing) and read
// back on later calls instead of inflating again: ~20 ms instead of ~220 ms for Fashion-MNIST's
// training images, which is what a restarted worker pays. An entry is used only while the source
// keeps its device, inode, size and modification time and the entry's CRC-32 matches; anything
// else is ignored and rewritten. A cache that cannot be written is skipped silently.
torch::Tensor readIdx(const std::string& path, const std::string& cache_dir = "");

// MNIST-layout files in `dir`: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (the raw file
// wins if both exist). Checks that the images are 3-dimensional, the image and label counts agree
// and labels are < 10. A missing file's error says to install dataset-fashion-mnist or set
// data.dir. Returns contiguous images [N, 1, H, W] scaled by 1/255 (not normalized).
TensorDataset loadMnistLike(const std::string& dir, Split split);

// The same files as stored: pixels uint8 [N, 1, H, W] and labels int64 [N], so that converting
// and normalizing take one pass (toFloatImages). `cache_dir` as in readIdx.
struct ByteImages {
  torch::Tensor pixels;
  torch::Tensor targets;
};
ByteImages loadMnistLikeBytes(const std::string& dir, Split split,
                              const std::string& cache_dir = "");

// A seeded, learnable synthetic dataset: class-dependent patterns plus noise, [n, 1, 28, 28].
// The same (n, seed) always gives bit-identical tensors. Sample i depends only on (seed, i), and
// the class patterns do not depend on the seed, so sets made with different seeds (train, test)
// pose the same task. Throws std::invalid_argument if n <= 0 or num_classes <= 0.
TensorDataset makeSynthetic(int64_t n, uint64_t seed, int64_t num_classes = 10);

struct Normalization {
  double mean = 0.0;
  double std = 1.0;
};
// Population mean and std of every pixel, summed serially in double so that every rank (whatever
// its thread count) gets the same bits. Throws std::invalid_argument on an empty dataset.
Normalization computeNormalization(const TensorDataset& train);
// images = (images - mean) / std, in place. Throws std::invalid_argument unless std > 0.
void applyNormalization(TensorDataset& dataset, const Normalization& norm);

// computeNormalization of the images pixels / 255 would have, from a 256-bin histogram of the
// bytes: exact counts, so every rank gets the same bits, and ~10x faster than the float pass.
// Throws std::invalid_argument on an empty tensor.
Normalization normalizationOfBytes(const torch::Tensor& pixels);
// Float images from bytes: pixels / 255, then normalized if `norm` is given. Each of the 256 byte
// values goes through the very float operations of the two-pass path (divide, then
// applyNormalization) once, into a table, so the result is bit-identical to it; the images are
// then one table lookup per pixel.
TensorDataset toFloatImages(const ByteImages& bytes, const std::optional<Normalization>& norm);

// Rows `indices` of the dataset, as contiguous tensors (copies). Throws std::out_of_range naming
// the first index outside [0, size).
Batch gather(const TensorDataset& dataset, const std::vector<int64_t>& indices);

}  // namespace cumulus::data
