// The byte level of the IDX reader (data/idx_format.h), as readIdx runs it: gunzip when the bytes
// start with the gzip magic, then the header checks. A DataError is the expected answer to bad
// input; an accepted image must be exactly header + payload bytes, its payload the product of its
// dimensions.

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/idx_format.h"
#include "tests/fuzz/fuzz_check.h"

using cumulus::data::DataError;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    cumulus::data::IdxBytes inflated;
    const bool gzip = cumulus::data::isGzip(data, size);
    if (gzip) {
      inflated = cumulus::data::gunzipIdx("fuzz.idx", data, size);
      data = inflated.data();
      size = inflated.size();
    }
    const cumulus::data::IdxLayout layout =
        cumulus::data::checkIdx("fuzz.idx", data, size, gzip ? " (decompressed)" : "");
    uint64_t product = 1;
    for (const int64_t n : layout.sizes) {
      cumulus::fuzz::check(n >= 1 && n <= 0xffffffffLL, "dimension " + std::to_string(n));
      product *= static_cast<uint64_t>(n);
    }
    cumulus::fuzz::check(product == layout.payload_bytes, "payload is not the dimensions' product");
    cumulus::fuzz::check(layout.header_bytes == 4 + 4 * layout.sizes.size(), "header size");
    cumulus::fuzz::check(layout.header_bytes + layout.payload_bytes == size,
                         "accepted an image whose size is not header + payload");
  } catch (const DataError&) {
  }
  return 0;
}
