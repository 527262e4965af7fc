#pragma once
// SHA-256 and HMAC-SHA-256 (OpenSSL's libcrypto), used by the connection handshake to prove
// knowledge of the job token without sending it, and fresh random nonces for it.
// Thread-safety: pure functions; randomBytes draws from OpenSSL's thread-safe CSPRNG.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cumulus::comm::tcp {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const std::string& data);
Digest hmacSha256(const std::string& key, const std::string& message);
std::string toHex(const Digest& digest);
// Constant-time comparison (CRYPTO_memcmp), so a prober learns nothing from timing.
bool digestEqual(const Digest& a, const Digest& b);
// `size` bytes from OpenSSL's CSPRNG (RAND_bytes). Throws std::runtime_error if it cannot seed.
void randomBytes(void* out, size_t size);

}  // namespace cumulus::comm::tcp
