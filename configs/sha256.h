#pragma once
// SHA-256 (FIPS 180-4), self-contained so that configs/ and its users need no OpenSSL. Used for the
// config digest and the checkpoint manifests. Not constant-time; do not use for secrets.
// On x86-64 CPUs with the SHA extensions (checked once with CPUID) the rounds run in hardware,
// ~1.9 GB/s against ~0.3 GB/s for the portable code; both give the same digests.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cumulus::configs {

// Incremental hasher: update() any number of times, then digest() once. Not thread-safe; cheap to
// construct, one per stream.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  // Finishes the hash. The object must not be updated afterwards (asserted).
  std::array<uint8_t, 32> digest();

 private:
  void compress(const uint8_t* blocks, size_t count);  // `count` 64-byte blocks
  void compressPortable(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

// Whether new hashing uses the CPU's SHA extensions (the default where the CPU has them).
bool sha256UsesShaExtensions();
// Turns the SHA extensions on or off for every hasher of the process (tests compare both paths);
// returns whether they are now on (false when the CPU lacks them, whatever `enabled` says).
bool setSha256ShaExtensions(bool enabled);

// Lower-case hex of SHA-256(data), 64 characters.
std::string sha256Hex(std::string_view data);
std::string toHex(const std::array<uint8_t, 32>& digest);

}  // namespace cumulus::configs
