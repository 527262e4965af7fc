#pragma once
// SHA-256 through OpenSSL's EVP interface, for the config digest and the checkpoint manifests.
// OpenSSL picks the fastest code the CPU has (the SHA extensions where present) at start-up; its
// documented OPENSSL_ia32cap variable can mask them, which is how the tests also run the
// portable path on CPUs that have them (tests/configs/CMakeLists.txt).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace cumulus::configs {

// Incremental hasher: update() any number of times, then digest() once. Not thread-safe; one per
// stream. Throws std::runtime_error if OpenSSL fails (out of memory).
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
  std::array<uint8_t, 32> digest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  bool finished_ = false;
};

// Lower-case hex of SHA-256(data), 64 characters.
std::string sha256Hex(std::string_view data);
std::string toHex(const std::array<uint8_t, 32>& digest);

}  // namespace cumulus::configs
