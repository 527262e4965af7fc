// NpyArray: a memory-mapped, validated .npy file, and the row copies that convert its dtype.
#include "data/npy.h"

#include <c10/util/Half.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "base/fd.h"
#include "base/regular_file.h"

namespace cumulus::data {
namespace {

// The mapping may start a value at any byte (numpy pads headers to 64 bytes, but a hand-made file
// need not): load through memcpy, which compiles to one unaligned load.
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A plain cast per element; the same type is a memcpy. float16 widens exactly through float.
template <typename Src, typename Dst>
void convertRun(const uint8_t* src, Dst* dst, size_t count) {
  if constexpr (std::is_same_v<Src, Dst>) {
    if (count > 0) std::memcpy(dst, src, count * sizeof(Dst));
  } else if constexpr (std::is_same_v<Src, c10::Half>) {
    for (size_t i = 0; i < count; ++i) {
      dst[i] = static_cast<Dst>(static_cast<float>(load<Src>(src + i * sizeof(Src))));
    }
  } else {
    for (size_t i = 0; i < count; ++i) dst[i] = static_cast<Dst>(load<Src>(src + i * sizeof(Src)));
  }
}

template <typename Dst>
void convertTo(NpyDType from, const uint8_t* src, Dst* dst, size_t count) {
  switch (from) {
    case NpyDType::kUInt8:
      return convertRun<uint8_t>(src, dst, count);
    case NpyDType::kUInt16:
      return convertRun<uint16_t>(src, dst, count);
    case NpyDType::kInt16:
      return convertRun<int16_t>(src, dst, count);
    case NpyDType::kInt32:
      return convertRun<int32_t>(src, dst, count);
    case NpyDType::kInt64:
      return convertRun<int64_t>(src, dst, count);
    case NpyDType::kFloat16:
      return convertRun<c10::Half>(src, dst, count);
    case NpyDType::kFloat32:
      return convertRun<float>(src, dst, count);
    case NpyDType::kFloat64:
      return convertRun<double>(src, dst, count);
  }
}

void checkType(const std::string& path, NpyDType from, torch::ScalarType to) {
  if (to != torch::kFloat32 && to != torch::kFloat64 && to != torch::kInt64) {
    throw std::invalid_argument(path + ": rows can be read as float32, float64 or int64, not " +
                                std::string(c10::toString(to)));
  }
  if (to == torch::kInt64 && isFloating(from)) {
    throw std::invalid_argument(path + ": " + dtypeName(from) +
                                " data cannot be read as int64 (it would be truncated)");
  }
}

std::string rangeText(int64_t rows) { return "an array of " + std::to_string(rows) + " rows"; }

}  // namespace

// The mapping of the whole file (header and data), read-only. No madvise: the kernel's default
// readahead is what slice() (evaluation, consecutive rows) and the token scan want, and for a
// training set that fits in the page cache the access pattern costs nothing after the first
// epoch. MADV_RANDOM would only pay off for a cold set larger than memory read in random order,
// and it would slow the sequential readers down by as much.
struct NpyArray::Mapping {
  std::string path;
  NpyLayout layout;
  void* base = nullptr;  // nullptr for an empty file: mmap of zero bytes fails (EINVAL)
  size_t length = 0;
  size_t row_elements = 0;  // product(shape[1:])

  const uint8_t* data() const { return static_cast<const uint8_t*>(base) + layout.header_bytes; }
  ~Mapping() {
    if (base != nullptr) ::munmap(base, length);
  }
};

NpyArray::NpyArray(std::unique_ptr<Mapping> mapping) : mapping_(std::move(mapping)) {}
NpyArray::~NpyArray() = default;
NpyArray::NpyArray(NpyArray&& other) noexcept = default;
NpyArray& NpyArray::operator=(NpyArray&& other) noexcept = default;

NpyArray NpyArray::open(const std::string& path) {
  std::string problem;
  base::Fd fd = base::openRegularFile(path, problem);  // a FIFO must not block the start
  if (!fd.valid()) failOn(path, problem);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    failOn(path, std::string("cannot stat: ") + std::strerror(errno));
  auto mapping = std::make_unique<Mapping>();
  mapping->path = path;
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (base == MAP_FAILED) failOn(path, std::string("cannot map: ") + std::strerror(errno));
    mapping->base = base;
    mapping->length = size;
  }
  fd.close();  // the mapping keeps the file open
  mapping->layout = checkNpy(path, static_cast<const uint8_t*>(mapping->base), size);
  const size_t item = itemSizeOf(mapping->layout.dtype);
  mapping->row_elements = static_cast<size_t>(mapping->layout.row_bytes / item);
  return NpyArray(std::move(mapping));
}

const std::string& NpyArray::path() const { return mapping_->path; }
NpyDType NpyArray::dtype() const { return mapping_->layout.dtype; }
const std::vector<int64_t>& NpyArray::shape() const { return mapping_->layout.shape; }
int64_t NpyArray::rows() const { return mapping_->layout.shape[0]; }
size_t NpyArray::itemSize() const { return itemSizeOf(mapping_->layout.dtype); }
size_t NpyArray::rowBytes() const { return static_cast<size_t>(mapping_->layout.row_bytes); }
const uint8_t* NpyArray::data() const { return mapping_->data(); }

void NpyArray::readRows(int64_t begin, int64_t count, torch::ScalarType type, void* out) const {
  const Mapping& m = *mapping_;
  checkType(m.path, m.layout.dtype, type);
  if (begin < 0 || count < 0 || count > rows() - begin) {
    throw std::out_of_range(m.path + ": rows [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") are out of range for " +
                            rangeText(rows()));
  }
  const uint8_t* src = m.data() + static_cast<size_t>(begin) * rowBytes();
  const size_t elements = static_cast<size_t>(count) * m.row_elements;
  switch (type) {
    case torch::kFloat32:
      return convertTo(m.layout.dtype, src, static_cast<float*>(out), elements);
    case torch::kFloat64:
      return convertTo(m.layout.dtype, src, static_cast<double*>(out), elements);
    default:
      return convertTo(m.layout.dtype, src, static_cast<int64_t*>(out), elements);
  }
}

std::vector<int64_t> NpyArray::batchShape(int64_t count) const {
  std::vector<int64_t> sizes = shape();
  sizes[0] = count;
  return sizes;
}

torch::Tensor NpyArray::gatherRows(const std::vector<int64_t>& indices,
                                   torch::ScalarType type) const {
  checkType(path(), dtype(), type);
  for (const int64_t i : indices) {
    if (i < 0 || i >= rows()) {
      throw std::out_of_range(path() + ": row " + std::to_string(i) + " is out of range for " +
                              rangeText(rows()));
    }
  }
  torch::Tensor out = torch::empty(batchShape(static_cast<int64_t>(indices.size())), type);
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const size_t out_row_bytes = mapping_->row_elements * torch::elementSize(type);
  for (size_t k = 0; k < indices.size(); ++k)
    readRows(indices[k], 1, type, dst + k * out_row_bytes);
  return out;
}

torch::Tensor NpyArray::sliceRows(int64_t begin, int64_t count, torch::ScalarType type) const {
  torch::Tensor out = torch::empty(batchShape(std::max<int64_t>(count, 0)), type);
  readRows(begin, count, type, out.data_ptr());
  return out;
}

}  // namespace cumulus::data
