#include "configs/sha256.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace cumulus::configs {
namespace {

constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#if defined(__x86_64__)
// The x86 SHA extensions (SHA-NI: Goldmont, Zen, Ice Lake and later) run the rounds in hardware,
// about 6x the portable code: a 40 MB checkpoint verifies in ~20 ms instead of ~130 ms. `state`
// is a, b, ..., h as FIPS 180-4 numbers them; the instructions want them as ABEF and CDGH.
__attribute__((target("sha,sse4.1,ssse3"))) void compressShaNi(uint32_t* state,
                                                               const uint8_t* blocks,
                                                               size_t count) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; count > 0; --count, blocks += 64) {
    const __m128i abef_in = abef;
    const __m128i cdgh_in = cdgh;
    __m128i w[4];  // the message schedule, four words at a time, as a ring of the last 16
    for (int i = 0; i < 16; ++i) {
      __m128i& wi = w[i & 3];
      if (i < 4) {
        wi = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * i)),
                              byte_swap);
      } else {
        // W[t..t+3] from W[t-16..t-1]: msg1 does the sigma0 part, msg2 the sigma1 part.
        const __m128i w_minus_7 = _mm_alignr_epi8(w[(i - 1) & 3], w[(i - 2) & 3], 4);
        wi = _mm_sha256msg2_epu32(
            _mm_add_epi32(_mm_sha256msg1_epu32(w[i & 3], w[(i - 3) & 3]), w_minus_7),
            w[(i - 1) & 3]);
      }
      __m128i k_plus_w = _mm_add_epi32(
          wi, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound.data() + 4 * i)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, k_plus_w);
      k_plus_w = _mm_shuffle_epi32(k_plus_w, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, k_plus_w);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

bool cpuHasShaNi() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool ssse3 = (ecx & (1u << 9)) != 0;
  const bool sse41 = (ecx & (1u << 19)) != 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return ssse3 && sse41 && (ebx & (1u << 29)) != 0;
}
#else
void compressShaNi(uint32_t*, const uint8_t*, size_t) {}
bool cpuHasShaNi() { return false; }
#endif

std::atomic<bool>& useShaNi() {
  static std::atomic<bool> use{cpuHasShaNi()};
  return use;
}

}  // namespace

bool sha256UsesShaExtensions() { return useShaNi().load(std::memory_order_relaxed); }

bool setSha256ShaExtensions(bool enabled) {
  const bool supported = cpuHasShaNi();
  useShaNi().store(enabled && supported, std::memory_order_relaxed);
  return enabled && supported;
}

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::compress(const uint8_t* block, size_t count) {
  if (useShaNi().load(std::memory_order_relaxed)) {
    compressShaNi(state_.data(), block, count);
    return;
  }
  for (; count > 0; --count, block += 64) compressPortable(block);
}

void Sha256::compressPortable(const uint8_t* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 |
           uint32_t(block[4 * i + 2]) << 8 | uint32_t(block[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + s1 + ch + kRound[i] + w[i];
    uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void* data, size_t size) {
  assert(!finished_ && "Sha256::update after digest");
  const auto* bytes = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  if (buffered_ > 0) {
    size_t take = std::min(size, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes, take);
    buffered_ += take;
    bytes += take;
    size -= take;
    if (buffered_ < buffer_.size()) return;
    compress(buffer_.data(), 1);
    buffered_ = 0;
  }
  const size_t blocks = size / 64;
  if (blocks > 0) compress(bytes, blocks);
  bytes += blocks * 64;
  size -= blocks * 64;
  std::memcpy(buffer_.data(), bytes, size);
  buffered_ = size;
}

std::array<uint8_t, 32> Sha256::digest() {
  assert(!finished_ && "Sha256::digest called twice");
  uint64_t bit_length = total_bytes_ * 8;
  // Padding: 0x80, zeros up to 56 mod 64, then the 64-bit big-endian bit length.
  uint8_t pad[72] = {0x80};
  size_t pad_size = (buffered_ < 56 ? 56 - buffered_ : 120 - buffered_);
  for (int i = 0; i < 8; ++i) pad[pad_size + i] = uint8_t(bit_length >> (56 - 8 * i));
  update(pad, pad_size + 8);
  assert(buffered_ == 0);
  finished_ = true;
  std::array<uint8_t, 32> out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = uint8_t(state_[i] >> (24 - 8 * j));
  }
  return out;
}

std::string toHex(const std::array<uint8_t, 32>& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint8_t byte : digest) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 15]);
  }
  return hex;
}

std::string sha256Hex(std::string_view data) {
  Sha256 hasher;
  hasher.update(data);
  return toHex(hasher.digest());
}

}  // namespace cumulus::configs
