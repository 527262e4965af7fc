#pragma once
// SHA-256, HMAC-SHA-256 and random nonces, all from OpenSSL's libcrypto: the config digest, the
// checkpoint manifests, and the connection handshake (which proves knowledge of the job token
// without sending it). OpenSSL picks the fastest code the CPU has (the SHA extensions where
// present) at start-up; its documented OPENSSL_ia32cap variable can mask them, which is how the
// tests also run the portable path on CPUs that have them.
//
// The free functions are pure and thread-safe; randomBytes draws from OpenSSL's thread-safe
// CSPRNG. A Sha256 object is not thread-safe: one per stream.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace cumulus::base {

using Digest = std::array<uint8_t, 32>;

// Incremental hasher: update() any number of times, then digest() once. Throws
// std::runtime_error if OpenSSL fails (out of memory).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(const void* data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  // Finishes the hash. The object must not be updated afterwards (throws std::logic_error).
  Digest digest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  bool finished_ = false;
};

Digest sha256(std::string_view data);
// Lower-case hex of SHA-256(data), 64 characters.
std::string sha256Hex(std::string_view data);
Digest hmacSha256(std::string_view key, std::string_view message);
// Lower-case hex, 64 characters.
std::string toHex(const Digest& digest);
// Constant-time comparison (CRYPTO_memcmp), so a prober learns nothing from timing.
bool digestEqual(const Digest& a, const Digest& b);
// `size` bytes from OpenSSL's CSPRNG (RAND_bytes). Throws std::runtime_error if it cannot seed.
void randomBytes(void* out, size_t size);

}  // namespace cumulus::base
