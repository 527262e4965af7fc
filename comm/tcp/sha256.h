#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), used by the connection handshake to prove
// knowledge of the job token without sending it. Small and dependency-free; not a hot path.
// Thread-safety: pure functions.

#include <array>
#include <cstdint>
#include <string>

namespace cumulus::comm::tcp {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const std::string& data);
Digest hmacSha256(const std::string& key, const std::string& message);
std::string toHex(const Digest& digest);
// Constant-time comparison, so a prober learns nothing from timing.
bool digestEqual(const Digest& a, const Digest& b);

}  // namespace cumulus::comm::tcp
