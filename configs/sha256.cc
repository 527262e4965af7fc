#include "configs/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace cumulus::configs {

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

std::array<uint8_t, 32> Sha256::digest() {
  if (finished_) throw std::logic_error("Sha256::digest called twice");
  finished_ = true;
  std::array<uint8_t, 32> out{};
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx_->md, out.data(), &size) != 1 || size != out.size()) {
    throw std::runtime_error("OpenSSL: SHA-256 final failed");
  }
  return out;
}

std::string toHex(const std::array<uint8_t, 32>& digest) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string sha256Hex(std::string_view data) {
  Sha256 hasher;
  hasher.update(data);
  return toHex(hasher.digest());
}

}  // namespace cumulus::configs
