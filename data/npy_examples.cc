// data.format npy (inputs.npy + targets.npy) and data.format tokens (windows of a token stream).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "data/npy.h"

namespace cumulus::data {
namespace {

void checkIndices(const std::vector<int64_t>& indices, int64_t size) {
  for (const int64_t i : indices) {
    if (i < 0 || i >= size) {
      throw std::out_of_range("gather: index " + std::to_string(i) + " is out of range for a " +
                              "dataset of " + std::to_string(size) + " samples");
    }
  }
}

void checkSlice(int64_t begin, int64_t count, int64_t size) {
  if (begin < 0 || count < 0 || begin > size - count) {
    throw std::out_of_range("slice: samples [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") are out of range for a " +
                            "dataset of " + std::to_string(size) + " samples");
  }
}

// Floating data trains as float32, integers (class ids, token ids) as int64.
torch::ScalarType readType(const NpyArray& array) {
  return isFloating(array.dtype()) ? torch::kFloat32 : torch::kInt64;
}

// "float32 [60000, 13]", with " (stored as float16)" when the file holds another dtype.
std::string arrayText(const NpyArray& array) {
  const torch::ScalarType type = readType(array);
  std::string text = std::string(type == torch::kFloat32 ? "float32" : "int64") + " [";
  for (size_t i = 0; i < array.shape().size(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(array.shape()[i]);
  }
  text += "]";
  const std::string stored = dtypeName(array.dtype());
  if (stored != "float32" && stored != "int64") text += " (stored as " + stored + ")";
  return text;
}

class NpyExamples final : public Examples {
 public:
  NpyExamples(std::string dir, NpyArray inputs, NpyArray targets)
      : dir_(std::move(dir)), inputs_(std::move(inputs)), targets_(std::move(targets)) {}

  int64_t size() const override { return inputs_.rows(); }
  Batch gather(const std::vector<int64_t>& indices) const override {
    checkIndices(indices, size());
    return {inputs_.gatherRows(indices, readType(inputs_)),
            targets_.gatherRows(indices, readType(targets_))};
  }
  Batch slice(int64_t begin, int64_t count) const override {
    checkSlice(begin, count, size());
    return {inputs_.sliceRows(begin, count, readType(inputs_)),
            targets_.sliceRows(begin, count, readType(targets_))};
  }
  std::string describe() const override {
    return dir_ + " (npy: inputs " + arrayText(inputs_) + ", targets " + arrayText(targets_) + ")";
  }

 private:
  std::string dir_;
  NpyArray inputs_;
  NpyArray targets_;
};

NpyArray openInDir(const std::string& dir, const std::string& name) {
  const std::string path = (dir.empty() || dir.back() == '/' ? dir : dir + "/") + name;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
    failOn(path,
           "not found; data.format npy wants a directory with inputs.npy and targets.npy "
           "(numpy.save)");
  }
  return NpyArray::open(path);
}

// The smallest and largest value of a 1-D integer array, in one pass the compiler vectorizes
// (no branch in the loop; loads through memcpy, as the mapping need not be aligned).
template <typename T>
std::pair<int64_t, int64_t> rangeOf(const uint8_t* p, size_t n) {
  T lo = std::numeric_limits<T>::max();
  T hi = std::numeric_limits<T>::lowest();
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
}

std::pair<int64_t, int64_t> tokenRange(const NpyArray& tokens) {
  const auto n = static_cast<size_t>(tokens.rows());
  switch (tokens.dtype()) {
    case NpyDType::kUInt8:
      return rangeOf<uint8_t>(tokens.data(), n);
    case NpyDType::kUInt16:
      return rangeOf<uint16_t>(tokens.data(), n);
    case NpyDType::kInt16:
      return rangeOf<int16_t>(tokens.data(), n);
    case NpyDType::kInt32:
      return rangeOf<int32_t>(tokens.data(), n);
    case NpyDType::kInt64:
      return rangeOf<int64_t>(tokens.data(), n);
    default:
      return {0, 0};  // refused before: not an integer dtype
  }
}

// The position of the first negative token (one exists: the range said so).
int64_t firstNegative(const NpyArray& tokens) {
  const int64_t n = tokens.rows();
  constexpr int64_t kChunk = 4096;
  std::vector<int64_t> buffer(kChunk);
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t count = std::min(kChunk, n - at);
    tokens.readRows(at, count, torch::kInt64, buffer.data());
    for (int64_t i = 0; i < count; ++i) {
      if (buffer[static_cast<size_t>(i)] < 0) return at + i;
    }
  }
  return -1;
}

class TokenWindows final : public TokenExamples {
 public:
  TokenWindows(NpyArray tokens, int64_t seq_len, std::pair<int64_t, int64_t> range)
      : tokens_(std::move(tokens)), seq_len_(seq_len), range_(range) {}

  int64_t size() const override { return (tokens_.rows() - 1) / seq_len_; }
  Batch gather(const std::vector<int64_t>& indices) const override {
    checkIndices(indices, size());
    const auto n = static_cast<int64_t>(indices.size());
    Batch batch{torch::empty({n, seq_len_}, torch::kInt64),
                torch::empty({n, seq_len_}, torch::kInt64)};
    int64_t* inputs = batch.inputs.data_ptr<int64_t>();
    int64_t* targets = batch.targets.data_ptr<int64_t>();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t start = indices[static_cast<size_t>(k)] * seq_len_;
      tokens_.readRows(start, seq_len_, torch::kInt64, inputs + k * seq_len_);
      tokens_.readRows(start + 1, seq_len_, torch::kInt64, targets + k * seq_len_);
    }
    return batch;
  }
  // Consecutive windows are consecutive tokens: two runs, whatever the count.
  Batch slice(int64_t begin, int64_t count) const override {
    checkSlice(begin, count, size());
    return {tokens_.sliceRows(begin * seq_len_, count * seq_len_, torch::kInt64)
                .view({count, seq_len_}),
            tokens_.sliceRows(begin * seq_len_ + 1, count * seq_len_, torch::kInt64)
                .view({count, seq_len_})};
  }
  std::string describe() const override {
    return tokens_.path() + " (tokens: " + std::to_string(tokens_.rows()) + " " +
           dtypeName(tokens_.dtype()) + ", windows of " + std::to_string(seq_len_) + "+1)";
  }
  int64_t seqLen() const override { return seq_len_; }
  int64_t tokenCount() const override { return tokens_.rows(); }
  int64_t minToken() const override { return range_.first; }
  int64_t maxToken() const override { return range_.second; }

 private:
  NpyArray tokens_;
  int64_t seq_len_;
  std::pair<int64_t, int64_t> range_;
};

}  // namespace

std::shared_ptr<const Examples> openNpyExamples(const std::string& dir) {
  NpyArray inputs = openInDir(dir, "inputs.npy");
  NpyArray targets = openInDir(dir, "targets.npy");
  if (inputs.rows() != targets.rows()) {
    failOn(dir, "inputs.npy has " + std::to_string(inputs.rows()) + " rows but targets.npy has " +
                    std::to_string(targets.rows()) +
                    "; sample i is row i of both, so their first dimensions must agree");
  }
  return std::make_shared<NpyExamples>(dir, std::move(inputs), std::move(targets));
}

std::shared_ptr<const TokenExamples> TokenExamples::open(const std::string& path, int64_t seq_len) {
  if (seq_len < 1) {
    throw std::invalid_argument("tokens: seq_len must be at least 1, got " +
                                std::to_string(seq_len));
  }
  NpyArray tokens = NpyArray::open(path);
  if (tokens.shape().size() != 1) {
    failOn(path, "a token stream is a 1-D array, but this one has shape " +
                     shapeText(tokens.shape()) + "; save a.ravel()");
  }
  if (isFloating(tokens.dtype())) {
    failOn(path, "token ids must be integers (uint8, uint16, int16, int32 or int64), not " +
                     dtypeName(tokens.dtype()) + "; save a.astype(numpy.uint16) or similar");
  }
  const std::pair<int64_t, int64_t> range = tokenRange(tokens);
  if (range.first < 0) {
    const int64_t at = firstNegative(tokens);
    int64_t value = 0;
    tokens.readRows(at, 1, torch::kInt64, &value);
    failOn(path, "token " + std::to_string(at) + " is " + std::to_string(value) +
                     "; token ids must be non-negative");
  }
  if (tokens.rows() <= seq_len) {
    throw DataError("seq_len " + std::to_string(seq_len) + " is longer than the token stream " +
                    path + " (" + std::to_string(tokens.rows()) +
                    " tokens); one sample needs seq_len + 1 tokens");
  }
  return std::make_shared<TokenWindows>(std::move(tokens), seq_len, range);
}

}  // namespace cumulus::data
