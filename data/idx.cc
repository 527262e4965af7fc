// IDX reading (gzip or raw) and the MNIST-layout loader.
#include "data/dataset.h"

#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace cumulus::data {
namespace {

// No IDX file we accept is larger than this (4 GiB less a byte), compressed or not; it bounds what
// a gzip bomb or a corrupt length can make us allocate, and keeps sizes within zlib's 32-bit uInt.
constexpr uint64_t kMaxIdxBytes = (uint64_t{1} << 32) - 1;
constexpr uint8_t kUint8Code = 0x08;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

// A malloc'd byte buffer. Unlike std::vector it does not zero what it allocates, so room reserved
// on the word of a size field (which may lie) costs address space, not memory or time.
class Bytes {
 public:
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  const uint8_t& operator[](size_t i) const { return data_.get()[i]; }
  void resize(size_t n) {
    void* p = std::realloc(data_.get(), std::max<size_t>(n, 1));
    if (p == nullptr) throw std::bad_alloc();
    data_.release();
    data_.reset(static_cast<uint8_t*>(p));
    size_ = n;
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

Bytes readWholeFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fileno(f.get()), &st) != 0) {
    fail(path, std::string("cannot stat: ") + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxIdxBytes) {
    fail(path, "file is larger than the 4 GiB limit");
  }
  Bytes bytes;
  bytes.resize(static_cast<size_t>(st.st_size));
  if (bytes.size() > 0 && std::fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) {
    fail(path, std::string("read error: ") + std::strerror(errno));
  }
  return bytes;
}

bool isGzip(const Bytes& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

// Inflates every gzip member in `in` (as gunzip does). The output buffer starts at the size the
// last member's trailer announces (ISIZE, exact for one member under 4 GiB), capped by deflate's
// maximum ratio (1032:1), and grows geometrically if that was short. The buffer is not zeroed,
// so a lying trailer only reserves address space.
Bytes gunzip(const std::string& path, const Bytes& in) {
  uint64_t hint = 0;
  if (in.size() >= 4) {
    for (int i = 0; i < 4; ++i) hint |= uint64_t{in[in.size() - 4 + i]} << (8 * i);
  }
  hint = std::min<uint64_t>({hint, in.size() * uint64_t{1032}, kMaxIdxBytes - 1});
  Bytes out;
  out.resize(static_cast<size_t>(std::max<uint64_t>(hint + 1, 4096)));  // +1: room to see the end
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) fail(path, "zlib inflateInit2 failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, &inflateEnd);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  uint64_t produced = 0;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() >= kMaxIdxBytes) fail(path, "decompresses to more than the 4 GiB limit");
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
        fail(path,
             std::to_string(zs.avail_in) + " bytes of trailing garbage after the gzip stream");
      }
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      fail(path, "truncated gzip stream (input ended after " + std::to_string(produced) +
                     " decompressed bytes)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      fail(path, std::string("corrupt gzip data: ") + (zs.msg ? zs.msg : zError(rc)));
    }
  }
  out.resize(static_cast<size_t>(produced));
  return out;
}

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

// Parses an in-memory IDX image. `what` is "" for raw files and " (decompressed)" for gzip, so
// byte counts in messages say which size they refer to.
torch::Tensor decodeIdx(const std::string& path, const Bytes& b, const std::string& what) {
  if (b.size() < 4) {
    fail(path, "too short for an IDX header: " + std::to_string(b.size()) + " bytes" + what);
  }
  if (b[0] != 0 || b[1] != 0) {
    fail(path, "not an IDX file: magic bytes " + hexByte(b[0]) + " " + hexByte(b[1]) + " " +
                   hexByte(b[2]) + " " + hexByte(b[3]) + ", expected 0x00 0x00 <dtype> <ndim>");
  }
  const uint8_t dtype = b[2];
  const int ndim = b[3];
  if (dtype != kUint8Code) {
    fail(path, "unsupported IDX dtype " + hexByte(dtype) + " (" + dtypeName(dtype) +
                   "); only 0x08 (uint8) is supported");
  }
  if (ndim < 1 || ndim > 4) {
    fail(path, "IDX header has " + std::to_string(ndim) + " dimensions; expected 1 to 4");
  }
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndim);
  if (b.size() < header) {
    fail(path, "truncated IDX header: " + std::to_string(ndim) + " dimensions need " +
                   std::to_string(header) + " bytes, got " + std::to_string(b.size()) + what);
  }
  std::vector<int64_t> sizes;
  std::string shape;
  // Each dimension is < 2^32 and there are at most 4, so the product fits in 128 bits exactly.
  unsigned __int128 payload = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t n = bigEndian32(&b[4 + 4 * d]);
    shape += (d ? "x" : "") + std::to_string(n);
    if (n == 0) fail(path, "IDX dimension " + std::to_string(d) + " is zero");
    sizes.push_back(n);
    payload *= n;
  }
  const uint64_t actual = b.size();
  if (payload > kMaxIdxBytes) {
    fail(path, "IDX dimensions " + shape + " are too large: the file has only " +
                   std::to_string(actual) + " bytes" + what);
  }
  const uint64_t expected = header + static_cast<uint64_t>(payload);
  if (actual < expected) {
    fail(path, "truncated IDX file: dimensions " + shape + " need " + std::to_string(expected) +
                   " bytes, got " + std::to_string(actual) + what);
  }
  if (actual > expected) {
    fail(path, std::to_string(actual - expected) +
                   " trailing bytes after the IDX data: " + "dimensions " + shape + " need " +
                   std::to_string(expected) + " bytes, got " + std::to_string(actual) + what);
  }
  // Allocated only now that the file has been shown to hold exactly this many bytes.
  torch::Tensor t = torch::empty(sizes, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), b.data() + header, static_cast<size_t>(payload));
  return t;
}

bool fileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// `dir/name`, else `dir/name.gz`; a DataError that says how to get the data if neither exists.
std::string findIdx(const std::string& dir, const std::string& name) {
  const std::string base = (dir.empty() || dir.back() == '/' ? dir : dir + "/") + name;
  if (fileExists(base)) return base;
  if (fileExists(base + ".gz")) return base + ".gz";
  throw DataError(base +
                  "[.gz]: not found; install the dataset-fashion-mnist package "
                  "(files in /usr/share/datasets/fashion-mnist) or set data.dir to a directory "
                  "holding MNIST-layout IDX files");
}

// ---- The decompressed cache -------------------------------------------------------------------
// A cache file is a fixed header and then the decompressed IDX bytes. The header names the .gz it
// came from by (device, inode, size, modification time): a source replaced or touched since makes
// the entry stale. A CRC-32 of the payload catches a torn or damaged cache file. Either way the
// entry is ignored and rewritten: the cache only ever saves time.
constexpr char kCacheMagic[16] = "cumulus-idx-v1";

struct CacheHeader {
  char magic[16];
  uint64_t source_dev;
  uint64_t source_ino;
  uint64_t source_size;
  int64_t source_mtime_ns;
  uint64_t payload_size;
  uint32_t payload_crc32;
  uint32_t reserved;
};
static_assert(sizeof(CacheHeader) == 64, "the cache header is 64 bytes on every build");

CacheHeader cacheHeaderFor(const struct stat& source) {
  CacheHeader h{};
  std::memcpy(h.magic, kCacheMagic, sizeof h.magic);
  h.source_dev = static_cast<uint64_t>(source.st_dev);
  h.source_ino = static_cast<uint64_t>(source.st_ino);
  h.source_size = static_cast<uint64_t>(source.st_size);
  h.source_mtime_ns = static_cast<int64_t>(source.st_mtim.tv_sec) * 1000000000 +
                      static_cast<int64_t>(source.st_mtim.tv_nsec);
  return h;
}

uint32_t crc32Of(const uint8_t* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib's length is 32-bit: feed it in pieces.
  for (size_t at = 0; at < size;) {
    const size_t n = std::min<size_t>(size - at, size_t{1} << 30);
    crc = crc32(crc, data + at, static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

// <cache_dir>/<file name without .gz>.<crc32 of the source path>: MNIST and Fashion-MNIST use the
// same file names, so the path's hash keeps their entries apart.
std::string cachePathFor(const std::string& cache_dir, const std::string& source) {
  std::string name = source.substr(source.rfind('/') + 1);
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  char tag[16];
  std::snprintf(tag, sizeof tag, ".%08x",
                crc32Of(reinterpret_cast<const uint8_t*>(source.data()), source.size()));
  return cache_dir + "/" + name + tag;
}

bool readFully(int fd, void* into, size_t size) {
  auto* p = static_cast<uint8_t*>(into);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool writeFully(int fd, const void* from, size_t size) {
  const auto* p = static_cast<const uint8_t*>(from);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The cached bytes of `source`, if a fresh and intact entry exists.
bool readCache(const std::string& cache_path, const struct stat& source, Bytes& out) {
  const int fd = ::open(cache_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::unique_ptr<int, void (*)(int*)> guard(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  struct stat st {};
  CacheHeader header{};
  if (fstat(fd, &st) != 0 || !readFully(fd, &header, sizeof header)) return false;
  const CacheHeader want = cacheHeaderFor(source);
  if (std::memcmp(header.magic, want.magic, sizeof header.magic) != 0 ||
      header.source_dev != want.source_dev || header.source_ino != want.source_ino ||
      header.source_size != want.source_size || header.source_mtime_ns != want.source_mtime_ns ||
      header.payload_size > kMaxIdxBytes ||
      static_cast<uint64_t>(st.st_size) != sizeof header + header.payload_size) {
    return false;
  }
  out.resize(static_cast<size_t>(header.payload_size));
  if (!readFully(fd, out.data(), out.size())) return false;
  return crc32Of(out.data(), out.size()) == header.payload_crc32;
}

// Best effort: a cache that cannot be written (read-only, full disk) costs the next start the
// gunzip again, nothing else. Written to a temporary name and renamed, so concurrent writers (the
// ranks of one host) and readers see a whole entry or none.
void writeCache(const std::string& cache_dir, const std::string& cache_path,
                const struct stat& source, const Bytes& bytes) {
  std::error_code ignored;
  std::filesystem::create_directories(cache_dir, ignored);
  const std::string tmp = cache_path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  CacheHeader header = cacheHeaderFor(source);
  header.payload_size = bytes.size();
  header.payload_crc32 = crc32Of(bytes.data(), bytes.size());
  const bool ok =
      writeFully(fd, &header, sizeof header) && writeFully(fd, bytes.data(), bytes.size());
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), cache_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
  }
}

}  // namespace

torch::Tensor readIdx(const std::string& path, const std::string& cache_dir) {
  struct stat source {};
  std::string cache_path;
  if (!cache_dir.empty() && ::stat(path.c_str(), &source) == 0 && S_ISREG(source.st_mode)) {
    cache_path = cachePathFor(cache_dir, path);
    Bytes cached;
    if (readCache(cache_path, source, cached)) return decodeIdx(path, cached, " (decompressed)");
  }
  const Bytes bytes = readWholeFile(path);
  if (!isGzip(bytes)) return decodeIdx(path, bytes, "");
  const Bytes inflated = gunzip(path, bytes);
  torch::Tensor t = decodeIdx(path, inflated, " (decompressed)");
  // Only a file that decoded is cached, so the cache never holds what the source would refuse.
  if (!cache_path.empty()) writeCache(cache_dir, cache_path, source, inflated);
  return t;
}

ByteImages loadMnistLikeBytes(const std::string& dir, Split split, const std::string& cache_dir) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string image_path = findIdx(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = findIdx(dir, prefix + "-labels-idx1-ubyte");
  torch::Tensor images = readIdx(image_path, cache_dir);
  torch::Tensor labels = readIdx(label_path, cache_dir);
  if (images.dim() != 3) {
    fail(image_path,
         "expected 3 dimensions (count, rows, columns), got " + std::to_string(images.dim()));
  }
  if (labels.dim() != 1) {
    fail(label_path, "expected 1 dimension (count), got " + std::to_string(labels.dim()));
  }
  if (images.size(0) != labels.size(0)) {
    fail(label_path, "has " + std::to_string(labels.size(0)) + " labels but " + image_path +
                         " has " + std::to_string(images.size(0)) + " images");
  }
  const int64_t max_label = labels.max().item<uint8_t>();
  if (max_label >= 10) {
    fail(label_path, "label " + std::to_string(max_label) + " is out of range 0..9");
  }
  ByteImages out;
  out.pixels = images.unsqueeze(1);
  out.labels = labels.to(torch::kInt64);
  return out;
}

TensorDataset loadMnistLike(const std::string& dir, Split split) {
  return toFloatImages(loadMnistLikeBytes(dir, split), std::nullopt);
}

}  // namespace cumulus::data
