#include "base/hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace cumulus::base {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: cannot start a SHA-256 hash");
  }
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t size) {
  if (finished_) throw std::logic_error("Sha256::update after digest()");
  if (size > 0 && EVP_DigestUpdate(ctx_->md, data, size) != 1) {
    throw std::runtime_error("OpenSSL: SHA-256 update failed");
  }
}

Digest Sha256::digest() {
  if (finished_) throw std::logic_error("Sha256::digest called twice");
  finished_ = true;
  Digest out{};
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx_->md, out.data(), &size) != 1 || size != out.size()) {
    throw std::runtime_error("OpenSSL: SHA-256 final failed");
  }
  return out;
}

Digest sha256(std::string_view data) {
  Digest out{};
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != out.size()) {
    throw std::runtime_error("OpenSSL SHA-256 failed");
  }
  return out;
}

std::string sha256Hex(std::string_view data) { return toHex(sha256(data)); }

Digest hmacSha256(std::string_view key, std::string_view message) {
  Digest out{};
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
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * digest.size());
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

}  // namespace cumulus::base
