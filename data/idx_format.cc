#include "data/idx_format.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace cumulus::data {
namespace {

constexpr uint8_t kUint8Code = 0x08;

uint32_t bigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

const char* dtypeName(uint8_t code) {
  switch (code) {
    case 0x08:
      return "uint8";
    case 0x09:
      return "int8";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "unknown";
  }
}

std::string hexByte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

}  // namespace

void IdxBytes::resize(size_t n) {
  void* p = std::realloc(data_.get(), std::max<size_t>(n, 1));
  if (p == nullptr) throw std::bad_alloc();
  data_.release();
  data_.reset(static_cast<uint8_t*>(p));
  size_ = n;
}

void IdxBytes::Free::operator()(uint8_t* p) const { std::free(p); }

bool isGzip(const uint8_t* data, size_t size) {
  return size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

// Inflates every gzip member in `data` (as gunzip does). The output buffer starts at the size the
// last member's trailer announces (ISIZE, exact for one member under 4 GiB), capped by deflate's
// maximum ratio (1032:1), and grows geometrically if that was short. The buffer is not zeroed,
// so a lying trailer only reserves address space.
IdxBytes gunzipIdx(const std::string& path, const uint8_t* data, size_t size) {
  uint64_t hint = 0;
  if (size >= 4) {
    for (int i = 0; i < 4; ++i) hint |= uint64_t{data[size - 4 + i]} << (8 * i);
  }
  hint = std::min<uint64_t>({hint, size * uint64_t{1032}, kMaxIdxBytes - 1});
  IdxBytes out;
  out.resize(static_cast<size_t>(std::max<uint64_t>(hint + 1, 4096)));  // +1: room to see the end
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) failOn(path, "zlib inflateInit2 failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, &inflateEnd);
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  uint64_t produced = 0;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() >= kMaxIdxBytes) failOn(path, "decompresses to more than the 4 GiB limit");
      out.resize(static_cast<size_t>(std::min<uint64_t>(out.size() * 2, kMaxIdxBytes)));
    }
    const uint64_t room = out.size() - produced;  // <= kMaxIdxBytes, so it fits in a uInt
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // Another member follows (concatenated .gz files), or garbage.
      if (zs.avail_in < 2 || zs.next_in[0] != 0x1f || zs.next_in[1] != 0x8b) {
        failOn(path,
               std::to_string(zs.avail_in) + " bytes of trailing garbage after the gzip stream");
      }
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      failOn(path, "truncated gzip stream (input ended after " + std::to_string(produced) +
                       " decompressed bytes)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      failOn(path, std::string("corrupt gzip data: ") + (zs.msg ? zs.msg : zError(rc)));
    }
  }
  out.resize(static_cast<size_t>(produced));
  return out;
}

IdxLayout checkIdx(const std::string& path, const uint8_t* b, size_t size,
                   const std::string& what) {
  if (size < 4) {
    failOn(path, "too short for an IDX header: " + std::to_string(size) + " bytes" + what);
  }
  if (b[0] != 0 || b[1] != 0) {
    failOn(path, "not an IDX file: magic bytes " + hexByte(b[0]) + " " + hexByte(b[1]) + " " +
                     hexByte(b[2]) + " " + hexByte(b[3]) + ", expected 0x00 0x00 <dtype> <ndim>");
  }
  const uint8_t dtype = b[2];
  const int ndim = b[3];
  if (dtype != kUint8Code) {
    failOn(path, "unsupported IDX dtype " + hexByte(dtype) + " (" + dtypeName(dtype) +
                     "); only 0x08 (uint8) is supported");
  }
  if (ndim < 1 || ndim > 4) {
    failOn(path, "IDX header has " + std::to_string(ndim) + " dimensions; expected 1 to 4");
  }
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndim);
  if (size < header) {
    failOn(path, "truncated IDX header: " + std::to_string(ndim) + " dimensions need " +
                     std::to_string(header) + " bytes, got " + std::to_string(size) + what);
  }
  std::vector<int64_t> sizes;
  std::string shape;
  // Each dimension is < 2^32 and there are at most 4, so the product fits in 128 bits exactly.
  unsigned __int128 payload = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t n = bigEndian32(&b[4 + 4 * d]);
    shape += (d ? "x" : "") + std::to_string(n);
    if (n == 0) failOn(path, "IDX dimension " + std::to_string(d) + " is zero");
    sizes.push_back(n);
    payload *= n;
  }
  const uint64_t actual = size;
  if (payload > kMaxIdxBytes) {
    failOn(path, "IDX dimensions " + shape + " are too large: the file has only " +
                     std::to_string(actual) + " bytes" + what);
  }
  const uint64_t expected = header + static_cast<uint64_t>(payload);
  if (actual < expected) {
    failOn(path, "truncated IDX file: dimensions " + shape + " need " + std::to_string(expected) +
                     " bytes, got " + std::to_string(actual) + what);
  }
  if (actual > expected) {
    failOn(path, std::to_string(actual - expected) +
                     " trailing bytes after the IDX data: " + "dimensions " + shape + " need " +
                     std::to_string(expected) + " bytes, got " + std::to_string(actual) + what);
  }
  IdxLayout layout;
  layout.sizes = std::move(sizes);
  layout.header_bytes = static_cast<size_t>(header);
  layout.payload_bytes = static_cast<size_t>(payload);
  return layout;
}

}  // namespace cumulus::data
