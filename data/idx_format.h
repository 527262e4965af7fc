#pragma once
// The byte level of IDX files, without LibTorch: bounded gunzip, and the checks of the header
// against the bytes. readIdx (data/dataset.h) reads a file, calls these, and only then allocates
// the tensor. Kept apart so that the fuzzer (tests/fuzz/idx_fuzz.cc) reaches every check that
// runs on untrusted bytes without linking LibTorch.
//
// Errors throw DataError "<path>: <what is wrong>". Thread-safe: no shared state.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/error.h"

namespace cumulus::data {

// No IDX file we accept is larger than this (4 GiB less a byte), compressed or not; it bounds what
// a gzip bomb or a corrupt length can make us allocate, and keeps sizes within zlib's 32-bit uInt.
constexpr uint64_t kMaxIdxBytes = (uint64_t{1} << 32) - 1;

// A malloc'd byte buffer. Unlike std::vector it does not zero what it allocates, so room reserved
// on the word of a size field (which may lie) costs address space, not memory or time.
class IdxBytes {
 public:
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  const uint8_t& operator[](size_t i) const { return data_.get()[i]; }
  // Keeps the first min(size, n) bytes. Throws std::bad_alloc.
  void resize(size_t n);

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

// True when the bytes start with the gzip magic 1f 8b.
bool isGzip(const uint8_t* data, size_t size);

// Inflates every gzip member in `data` (as gunzip does), to at most kMaxIdxBytes. Throws DataError
// naming `path` for corrupt, truncated or oversized streams and for trailing garbage.
IdxBytes gunzipIdx(const std::string& path, const uint8_t* data, size_t size);

// Where the payload of a checked IDX image lies.
struct IdxLayout {
  std::vector<int64_t> sizes;  // the dimensions, each ≥ 1
  size_t header_bytes = 0;     // the payload starts here
  size_t payload_bytes = 0;    // the product of `sizes`; header + payload is the whole image
};

// Checks an in-memory IDX image: magic, dtype (only 0x08, uint8), 1 to 4 dimensions, none zero,
// and a size of exactly header + payload. `what` is "" for raw files and " (decompressed)" for
// gzip, so byte counts in messages say which size they refer to. Throws DataError naming `path`.
IdxLayout checkIdx(const std::string& path, const uint8_t* data, size_t size,
                   const std::string& what);

}  // namespace cumulus::data
