#include "comm/reduce.h"

#include <cassert>
#include <type_traits>

// The hot loops below are written so that GCC vectorizes them at -O3 (core.cmake sets -O3 on
// this file): no aliasing (__restrict), no early exits, branch-free selects. Each is compiled
// twice (target_clones): once for x86-64-v3 (AVX2 + FMA + F16C, where the float16 conversions
// become vcvtph2ps / vcvtps2ph) and once for the baseline, picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CUMULUS_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CUMULUS_CLONES
#endif

namespace cumulus::comm {
namespace {

using Half = _Float16;

// NaN-propagating max/min without branches: if a is NaN, (a != a) picks a; if b is NaN, every
// comparison is false and b is picked.
template <typename T>
inline T maxOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (a != a || a > b) ? a : b;
  return a > b ? a : b;
}
template <typename T>
inline T minOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (a != a || a < b) ? a : b;
  return a < b ? a : b;
}

template <typename T>
inline void sumLoop(T* __restrict d, const T* __restrict s, size_t n) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap-around, not undefined behaviour
    for (size_t i = 0; i < n; ++i)
      d[i] = static_cast<T>(static_cast<U>(d[i]) + static_cast<U>(s[i]));
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = d[i] + s[i];
  }
}
template <typename T>
inline void maxLoop(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = maxOf(d[i], s[i]);
}
template <typename T>
inline void minLoop(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = minOf(d[i], s[i]);
}

// One cloned entry per (type, op) so the dispatcher resolves once per process, not per element.
#define CUMULUS_NATIVE_KERNELS(T, NAME)                                              \
  CUMULUS_CLONES void sum_##NAME(T* __restrict d, const T* __restrict s, size_t n) { \
    sumLoop(d, s, n);                                                                \
  }                                                                                  \
  CUMULUS_CLONES void max_##NAME(T* __restrict d, const T* __restrict s, size_t n) { \
    maxLoop(d, s, n);                                                                \
  }                                                                                  \
  CUMULUS_CLONES void min_##NAME(T* __restrict d, const T* __restrict s, size_t n) { \
    minLoop(d, s, n);                                                                \
  }
CUMULUS_NATIVE_KERNELS(float, f32)
CUMULUS_NATIVE_KERNELS(double, f64)
CUMULUS_NATIVE_KERNELS(int32_t, i32)
CUMULUS_NATIVE_KERNELS(int64_t, i64)
#undef CUMULUS_NATIVE_KERNELS

// float16: widen, operate in float32, narrow with round-to-nearest-even (the hardware/libgcc
// conversion of _Float16 does exactly that and keeps NaN a NaN).
CUMULUS_CLONES void sum_f16(Half* __restrict d, const Half* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i)
    d[i] = static_cast<Half>(static_cast<float>(d[i]) + static_cast<float>(s[i]));
}
CUMULUS_CLONES void max_f16(Half* __restrict d, const Half* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i)
    d[i] = static_cast<Half>(maxOf(static_cast<float>(d[i]), static_cast<float>(s[i])));
}
CUMULUS_CLONES void min_f16(Half* __restrict d, const Half* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i)
    d[i] = static_cast<Half>(minOf(static_cast<float>(d[i]), static_cast<float>(s[i])));
}

// bfloat16: bit-level widen/narrow (see reduce.h), which vectorizes as shifts, adds and blends.
CUMULUS_CLONES void sum_bf16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = floatToBf16(bf16ToFloat(d[i]) + bf16ToFloat(s[i]));
}
CUMULUS_CLONES void max_bf16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = floatToBf16(maxOf(bf16ToFloat(d[i]), bf16ToFloat(s[i])));
}
CUMULUS_CLONES void min_bf16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = floatToBf16(minOf(bf16ToFloat(d[i]), bf16ToFloat(s[i])));
}

template <typename T>
void dispatch(void* dst, const void* src, size_t n, ReduceOp op,
              void (*sum)(T* __restrict, const T* __restrict, size_t),
              void (*max)(T* __restrict, const T* __restrict, size_t),
              void (*min)(T* __restrict, const T* __restrict, size_t)) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      sum(d, s, n);
      return;
    case ReduceOp::kMax:
      max(d, s, n);
      return;
    case ReduceOp::kMin:
      min(d, s, n);
      return;
  }
}

template <typename T>
void divideLoop(T* __restrict d, size_t n, T divisor) {
  for (size_t i = 0; i < n; ++i) d[i] = d[i] / divisor;
}

}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (dtype) {
    case DType::kFloat32:
      return dispatch<float>(dst, src, count, op, sum_f32, max_f32, min_f32);
    case DType::kFloat64:
      return dispatch<double>(dst, src, count, op, sum_f64, max_f64, min_f64);
    case DType::kBFloat16:
      return dispatch<uint16_t>(dst, src, count, op, sum_bf16, max_bf16, min_bf16);
    case DType::kFloat16:
      return dispatch<Half>(dst, src, count, op, sum_f16, max_f16, min_f16);
    case DType::kInt32:
      return dispatch<int32_t>(dst, src, count, op, sum_i32, max_i32, min_i32);
    case DType::kInt64:
      return dispatch<int64_t>(dst, src, count, op, sum_i64, max_i64, min_i64);
  }
  assert(false && "unknown DType");
}

void divideBy(void* data, size_t count, DType dtype, int divisor) {
  assert(divisor >= 1);
  if (count == 0 || divisor == 1) return;
  switch (dtype) {
    case DType::kFloat32:
      return divideLoop(static_cast<float*>(data), count, static_cast<float>(divisor));
    case DType::kFloat64:
      return divideLoop(static_cast<double*>(data), count, static_cast<double>(divisor));
    case DType::kInt32:
      return divideLoop(static_cast<int32_t*>(data), count, static_cast<int32_t>(divisor));
    case DType::kInt64:
      return divideLoop(static_cast<int64_t*>(data), count, static_cast<int64_t>(divisor));
    case DType::kBFloat16: {
      auto* d = static_cast<uint16_t*>(data);
      const float f = static_cast<float>(divisor);
      for (size_t i = 0; i < count; ++i) d[i] = floatToBf16(bf16ToFloat(d[i]) / f);
      return;
    }
    case DType::kFloat16: {
      auto* d = static_cast<Half*>(data);
      const float f = static_cast<float>(divisor);
      for (size_t i = 0; i < count; ++i) d[i] = static_cast<Half>(static_cast<float>(d[i]) / f);
      return;
    }
  }
  assert(false && "unknown DType");
}

}  // namespace cumulus::comm
