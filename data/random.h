#pragma once
// A tiny self-contained PRNG (SplitMix64, Steele et al., "Fast splittable pseudorandom number
// generators", 2014). The sampler and the synthetic dataset use it instead of torch's global
// generator so that their output depends only on their seeds: identical on every platform, for
// every thread count, and never perturbed by (or perturbing) model initialization or dropout.
// Not thread-safe per instance; instances are cheap, make one per stream.

#include <cstdint>

namespace cumulus::data {

// The SplitMix64 finalizer: a bijective 64-bit mix. Also used to derive stream keys.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A key for sub-stream `stream` of `seed` (e.g. an epoch, a sample index). Distinct (seed, stream)
// pairs give unrelated sequences.
constexpr uint64_t streamKey(uint64_t seed, uint64_t stream) {
  return mix64(mix64(seed) ^ mix64(stream + 0x9E3779B97F4A7C15ULL));
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return mix64(state_);
  }

  // Uniform in [0, bound), bound > 0, without modulo bias (Lemire's multiply-shift with
  // rejection, "Fast random integer generation in an interval", 2019).
  uint64_t below(uint64_t bound) {
    uint64_t x = next();
    unsigned __int128 m = static_cast<unsigned __int128>(x) * bound;
    auto low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        x = next();
        m = static_cast<unsigned __int128>(x) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform float in [0, 1) with 24 random bits: exact in float32. (Converting through int32 is
  // one instruction; uint64 -> float is a slow branchy sequence without AVX-512.)
  float uniform() {
    return static_cast<float>(static_cast<int32_t>(next() >> 40)) * (1.0f / 16777216.0f);
  }

 private:
  uint64_t state_;
};

}  // namespace cumulus::data
