#pragma once
// Element-wise reduction kernels over raw buffers: the arithmetic of every collective.
//
// Semantics (the same on every rank and algorithm, so results are reproducible):
// - sum: floats add in IEEE arithmetic of their own type; bfloat16 and float16 are widened to
//   float32, added, and rounded back to nearest-even (NaN stays NaN) after every pairwise step.
//   Integers wrap around on overflow (two's complement), they never trap.
// - avg: kernels compute the sum; the collective divides once at the end with divideBy() by the
//   world size. Floats use true division (correctly rounded), integers truncate toward zero
//   (C++ `/`), e.g. avg of {-3, 0} over 2 ranks is -1.
// - max/min: a NaN in either operand gives NaN (as torch.maximum), otherwise the larger/smaller.
//
// Thread-safety: pure functions. dst and src must not overlap (they are declared __restrict).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "comm/types.h"

namespace cumulus::comm {

// dst[i] = dst[i] (op) src[i] for i in [0, count). kAvg accumulates like kSum. The bitwise ops
// take integer dtypes only (reduceProblem in comm/types.h; the callers check it).
void reduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);

// data[i] = data[i] / divisor for i in [0, count); see "avg" above. divisor >= 1.
void divideBy(void* data, size_t count, DType dtype, int divisor);

// bfloat16 <-> float32: widening is exact; narrowing rounds to nearest-even, NaN stays a quiet
// NaN of the same sign.
inline float bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace cumulus::comm
