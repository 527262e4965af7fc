#pragma once
// Examples: a dataset of (input, target) samples numbered 0 .. size()-1. The sampler picks the
// numbers; the trainer's BatchSource and Evaluator read the samples through this interface only,
// whatever holds them: tensors in memory (the IDX and synthetic sets, inMemory below),
// memory-mapped .npy arrays, or windows of a token stream.
//
// const methods may run concurrently (a prefetching reader may gather the next batch while the
// training thread reads the current one). Errors in the underlying files are found when the
// Examples is made (DataError), not in gather().

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cumulus::data {

// Samples stacked along a new first dimension: inputs [n, ...], targets [n, ...].
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

class Examples {
 public:
  virtual ~Examples() = default;
  virtual int64_t size() const = 0;
  // Samples `indices`, in that order, as contiguous tensors that do not alias the source. Throws
  // std::out_of_range naming the first index outside [0, size()).
  virtual Batch gather(const std::vector<int64_t>& indices) const = 0;
  // Samples [begin, begin + count) (evaluation reads consecutive runs). The default gathers.
  virtual Batch slice(int64_t begin, int64_t count) const;
  // For messages and the run summary: what and where, e.g. "data/train (npy, 60000 samples)".
  virtual std::string describe() const = 0;
};

struct TensorDataset;
// Examples over tensors in memory (shared, not copied): sample i is row i of dataset.inputs and
// dataset.targets. `description` is what describe() returns.
std::shared_ptr<const Examples> inMemory(const TensorDataset& dataset, std::string description);

}  // namespace cumulus::data
