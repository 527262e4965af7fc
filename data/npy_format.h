#pragma once
// The byte level of NumPy .npy files, without LibTorch: the dtypes we read and the checks of a
// file's header against its size. NpyArray (data/npy.h) maps a file, calls checkNpy on the
// mapping, and only then hands out rows. Kept apart so that the fuzzer (tests/fuzz/npy_fuzz.cc)
// reaches every check that runs on untrusted bytes without linking LibTorch.
//
// The format: the magic "\x93NUMPY", a major and a minor version byte, the header length
// (little-endian u16 for version 1.0, u32 for 2.0 and 3.0), then the header, a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 5), } padded with spaces and a
// newline, then the data. Errors throw DataError "<path>: <what is wrong>". Thread-safe: no
// shared state.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/error.h"

namespace cumulus::data {

enum class NpyDType { kUInt8, kUInt16, kInt16, kInt32, kInt64, kFloat16, kFloat32, kFloat64 };

// numpy's spelling: "uint8", "float32", ...
std::string dtypeName(NpyDType dtype);
bool isFloating(NpyDType dtype);
size_t itemSizeOf(NpyDType dtype);

// No header we accept is longer than this. numpy writes ~128 bytes for any array we read (its own
// reader refuses more than 10,000 by default); the bound keeps a lying length from costing a scan.
constexpr uint64_t kMaxNpyHeaderBytes = uint64_t{1} << 20;

// Where the data of a checked .npy file lies, and what it holds.
struct NpyLayout {
  NpyDType dtype = NpyDType::kUInt8;
  std::vector<int64_t> shape;  // at least one dimension; each >= 0
  size_t header_bytes = 0;     // the data starts here
  uint64_t row_bytes = 0;      // product(shape[1:]) * item size
  uint64_t data_bytes = 0;     // shape[0] * row_bytes; header + data is the whole file
};

// Checks the first `size` bytes of a file (all of it): the magic string, the version (1.0, 2.0 or
// 3.0), the header dictionary (exactly the keys descr, fortran_order and shape, in any order, a
// trailing comma allowed), a supported little-endian or byte-sized dtype, C order (or a shape for
// which Fortran order is the same bytes), at least one dimension, byte counts that fit in 63 bits,
// and a file of exactly header + data bytes. Throws DataError naming `path`.
NpyLayout checkNpy(const std::string& path, const uint8_t* data, size_t size);

// "(2, 5)", "(3,)", "()": a shape as numpy prints it.
std::string shapeText(const std::vector<int64_t>& shape);

}  // namespace cumulus::data
