// The .npy header checks (data/npy_format.h), as NpyArray::open runs them on a mapped file. A
// DataError is the expected answer to bad input; an accepted file must be exactly header + data
// bytes, with a data size that is the product of its shape and item size, and a supported dtype.

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/npy_format.h"
#include "tests/fuzz/fuzz_check.h"

using cumulus::data::DataError;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const cumulus::data::NpyLayout layout = cumulus::data::checkNpy("fuzz.npy", data, size);
    cumulus::fuzz::check(!layout.shape.empty(), "accepted a 0-d array");
    const uint64_t item = cumulus::data::itemSizeOf(layout.dtype);
    cumulus::fuzz::check(item == 1 || item == 2 || item == 4 || item == 8, "item size");
    unsigned __int128 row = item;
    for (size_t i = 1; i < layout.shape.size(); ++i) {
      cumulus::fuzz::check(layout.shape[i] >= 0, "negative dimension");
      row *= static_cast<uint64_t>(layout.shape[i]);
    }
    cumulus::fuzz::check(layout.shape[0] >= 0, "negative rows");
    cumulus::fuzz::check(row == layout.row_bytes, "row bytes are not the trailing product");
    cumulus::fuzz::check(row * static_cast<uint64_t>(layout.shape[0]) == layout.data_bytes,
                         "data bytes are not rows * row bytes");
    cumulus::fuzz::check(layout.header_bytes >= 10 && layout.header_bytes <= size, "header size");
    cumulus::fuzz::check(layout.header_bytes + layout.data_bytes == size,
                         "accepted a file whose size is not header + data");
  } catch (const DataError&) {
  }
  return 0;
}
