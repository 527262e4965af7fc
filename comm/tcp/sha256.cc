#include "comm/tcp/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace cumulus::comm::tcp {

Digest sha256(const std::string& data) {
  Digest out;
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != out.size()) {
    throw std::runtime_error("OpenSSL SHA-256 failed");
  }
  return out;
}

Digest hmacSha256(const std::string& key, const std::string& message) {
  Digest out;
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(),
           &size) == nullptr ||
      size != out.size()) {
    throw std::runtime_error("OpenSSL HMAC-SHA-256 failed");
  }
  return out;
}

std::string toHex(const Digest& digest) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

bool digestEqual(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void randomBytes(void* out, size_t size) {
  if (RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(size)) != 1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed: no entropy for a handshake nonce");
  }
}

}  // namespace cumulus::comm::tcp
