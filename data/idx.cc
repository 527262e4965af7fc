// IDX reading (gzip or raw) and the MNIST-layout loader.
#include "base/fd.h"
#include "base/regular_file.h"
#include "data/dataset.h"
#include "data/idx_format.h"

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

using Bytes = IdxBytes;

bool readFully(int fd, void* out, size_t n);

Bytes readWholeFile(const std::string& path) {
  std::string problem;
  const base::Fd fd = base::openRegularFile(path, problem);  // a FIFO must not block the start
  if (!fd.valid()) failOn(path, problem);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) failOn(path, std::string("cannot stat: ") + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) > kMaxIdxBytes) {
    failOn(path, "file is larger than the 4 GiB limit");
  }
  Bytes bytes;
  bytes.resize(static_cast<size_t>(st.st_size));
  errno = 0;
  if (!readFully(fd.get(), bytes.data(), bytes.size())) {
    failOn(path, std::string("read error: ") + (errno != 0 ? std::strerror(errno) : "file shrank"));
  }
  return bytes;
}

// Parses an in-memory IDX image into a tensor (the checks: data/idx_format.h).
torch::Tensor decodeIdx(const std::string& path, const Bytes& b, const std::string& what) {
  const IdxLayout layout = checkIdx(path, b.data(), b.size(), what);
  // Allocated only now that the file has been shown to hold exactly this many bytes.
  torch::Tensor t = torch::empty(layout.sizes, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), b.data() + layout.header_bytes, layout.payload_bytes);
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
  std::string problem;  // no cache entry, or not a file: the entry is rebuilt
  const base::Fd owner = base::openRegularFile(cache_path, problem);
  if (!owner.valid()) return false;
  const int fd = owner.get();
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
  if (!isGzip(bytes.data(), bytes.size())) return decodeIdx(path, bytes, "");
  const Bytes inflated = gunzipIdx(path, bytes.data(), bytes.size());
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
    failOn(image_path,
           "expected 3 dimensions (count, rows, columns), got " + std::to_string(images.dim()));
  }
  if (labels.dim() != 1) {
    failOn(label_path, "expected 1 dimension (count), got " + std::to_string(labels.dim()));
  }
  if (images.size(0) != labels.size(0)) {
    failOn(label_path, "has " + std::to_string(labels.size(0)) + " labels but " + image_path +
                           " has " + std::to_string(images.size(0)) + " images");
  }
  const int64_t max_label = labels.max().item<uint8_t>();
  if (max_label >= 10) {
    failOn(label_path, "label " + std::to_string(max_label) + " is out of range 0..9");
  }
  ByteImages out;
  out.pixels = images.unsqueeze(1);
  out.targets = labels.to(torch::kInt64);
  return out;
}

TensorDataset loadMnistLike(const std::string& dir, Split split) {
  return toFloatImages(loadMnistLikeBytes(dir, split), std::nullopt);
}

}  // namespace cumulus::data
