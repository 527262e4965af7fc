#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0, as numpy.save writes them), memory-mapped
// read-only so that a dataset larger than memory works: only the rows a batch reads are paged in.
//
// Accepted: C order (fortran_order False), little-endian or byte-sized dtypes uint8, uint16,
// int16, int32, int64, float16, float32, float64, any number of dimensions >= 1. open() checks
// the magic string, the version, the header dictionary (descr, fortran_order and shape, nothing
// missing, nothing malformed), and that the file holds exactly product(shape) * item size bytes
// after the header. Each problem throws DataError "<path>: <what is wrong>" (data/error.h).
//
// An NpyArray is movable, not copyable; the mapping lives as long as the object (the file
// descriptor is closed once the file is mapped). const methods may run concurrently. Reading a row
// blocks on the page-in if it is not in the page cache (a local disk; no timeout applies). A file
// truncated by someone else while mapped makes a read of the lost pages raise SIGBUS, as with any
// mapped file: write a new file and rename it over the old one instead.

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/examples.h"
#include "data/npy_format.h"

namespace cumulus::data {

// NpyDType, dtypeName and isFloating: data/npy_format.h (the LibTorch-free header checks).

class NpyArray {
 public:
  // Maps `path` and validates it (see the top of this file).
  static NpyArray open(const std::string& path);
  ~NpyArray();
  NpyArray(NpyArray&& other) noexcept;
  NpyArray& operator=(NpyArray&& other) noexcept;
  NpyArray(const NpyArray&) = delete;
  NpyArray& operator=(const NpyArray&) = delete;

  const std::string& path() const;
  NpyDType dtype() const;
  const std::vector<int64_t>& shape() const;
  int64_t rows() const;         // shape[0]
  size_t itemSize() const;      // bytes per element
  size_t rowBytes() const;      // bytes per row: product(shape[1:]) * itemSize()
  const uint8_t* data() const;  // the first element, inside the mapping

  // Rows `indices` (in that order) converted to `type`: a tensor [indices.size(), shape[1:]...].
  // `type` is kFloat32, kFloat64 or kInt64; float16 is widened exactly (through c10::Half).
  // Throws std::out_of_range naming the first index outside [0, rows()), std::invalid_argument
  // for another `type` or for floating data asked for as kInt64.
  torch::Tensor gatherRows(const std::vector<int64_t>& indices, torch::ScalarType type) const;
  // Rows [begin, begin + count) converted to `type`, as one run over the mapping (no per-row
  // work). Throws std::out_of_range unless 0 <= begin <= begin + count <= rows().
  torch::Tensor sliceRows(int64_t begin, int64_t count, torch::ScalarType type) const;
  // The conversion under both: rows [begin, begin + count) as `type` into `out`, which has room
  // for count * product(shape[1:]) elements of `type`. Throws as sliceRows and gatherRows do.
  void readRows(int64_t begin, int64_t count, torch::ScalarType type, void* out) const;

 private:
  struct Mapping;
  explicit NpyArray(std::unique_ptr<Mapping> mapping);
  std::vector<int64_t> batchShape(int64_t count) const;  // shape() with shape[0] = count
  std::unique_ptr<Mapping> mapping_;
};

// data.format npy: `dir`/inputs.npy and `dir`/targets.npy, sample i being row i of both.
// Floating arrays are read as float32 and integer arrays as int64 (class ids, token ids), each
// sample keeping its trailing shape. Throws DataError for a missing or invalid file, or when the
// two files' first dimensions differ (naming both and both counts).
std::shared_ptr<const Examples> openNpyExamples(const std::string& dir);

// data.format tokens: a 1-D .npy array of token ids (uint8, uint16, int32 or int64) read as
// windows of seq_len + 1 consecutive tokens. Sample i starts at token i * seq_len: inputs are
// tokens [i*T, i*T + T) and targets tokens [i*T + 1, i*T + T + 1), both int64 [T] (T = seq_len),
// so consecutive samples cover the stream once and size() = (tokens - 1) / T. open checks the
// whole stream once and keeps its smallest and largest token id.
class TokenExamples : public Examples {
 public:
  // Throws DataError for an invalid file, a file that is not 1-D or not of an integer dtype, a
  // negative token id (naming its position), or a stream too short for one window ("seq_len T is
  // longer than the token stream PATH (N tokens)"); std::invalid_argument if seq_len < 1.
  static std::shared_ptr<const TokenExamples> open(const std::string& path, int64_t seq_len);

  virtual int64_t seqLen() const = 0;
  virtual int64_t tokenCount() const = 0;
  virtual int64_t minToken() const = 0;
  virtual int64_t maxToken() const = 0;
};

}  // namespace cumulus::data
