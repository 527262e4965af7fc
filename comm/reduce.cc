#include "comm/reduce.h"

#include <cassert>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// The AVX helpers below are internal and only called from AVX-enabled code: no ABI concern.
#pragma GCC diagnostic ignored "-Wpsabi"

// The hot loops below are written so that GCC vectorizes them at -O3 (core.cmake sets -O3 on
// this file): no aliasing (__restrict), no early exits, branch-free selects. Each is compiled
// twice (target_clones): once for x86-64-v3 (AVX2 + FMA + F16C, where the float16 conversions
// become vcvtph2ps / vcvtps2ph) and once for the baseline, picked at load time.
// Not under ThreadSanitizer: the clones' resolvers run while the dynamic loader relocates the
// program, before the TSan runtime is up, and their instrumented entry crashes it. Dropping the
// clones there (rather than the instrumentation) keeps the kernels' reads and writes visible to
// TSan, which is what it is for; the explicit AVX2 paths below still run.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CUMULUS_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CUMULUS_CLONES
#endif

namespace cumulus::comm {
namespace {

// Only conversions to and from float touch it. Clang 14 (the fuzz build) has no _Float16 on
// x86-64; its __fp16 is the same IEEE binary16 storage with the same conversions.
#if defined(__clang__) && __clang_major__ < 15
using Half = __fp16;
#else
using Half = _Float16;
#endif

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

// float16: widen, operate in float32, narrow with round-to-nearest-even (NaN stays NaN). GCC
// does not vectorize _Float16 conversions, so on CPUs with F16C + AVX2 the loops below convert
// eight at a time with vcvtph2ps / vcvtps2ph; the scalar tail and other CPUs use _Float16,
// whose conversions round the same way.
enum class Pick { kSum, kMax, kMin };

template <Pick kOp>
inline float pickScalar(float a, float b) {
  if constexpr (kOp == Pick::kSum) return a + b;
  if constexpr (kOp == Pick::kMax) return maxOf(a, b);
  return minOf(a, b);
}

template <Pick kOp>
void halfScalar(Half* __restrict d, const Half* __restrict s, size_t from, size_t n) {
  for (size_t i = from; i < n; ++i) {
    d[i] = static_cast<Half>(pickScalar<kOp>(static_cast<float>(d[i]), static_cast<float>(s[i])));
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
template <Pick kOp>
__attribute__((target("avx2,f16c"))) void halfF16c(Half* __restrict d, const Half* __restrict s,
                                                   size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    __m256 r;
    if constexpr (kOp == Pick::kSum) {
      r = _mm256_add_ps(a, b);
    } else {
      // Same NaN rule as maxOf/minOf: take a where a is NaN or a wins, else b.
      const __m256 wins = _mm256_cmp_ps(a, b, kOp == Pick::kMax ? _CMP_GT_OQ : _CMP_LT_OQ);
      r = _mm256_blendv_ps(b, a, _mm256_or_ps(wins, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  halfScalar<kOp>(d, s, i, n);
}
// Asked once, on first use (not at static initialization, whose order across files is unknown).
bool haveAvx2() {
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));
  return yes;
}
bool haveF16c() {
  static const bool yes = haveAvx2() && __builtin_cpu_supports("f16c");
  return yes;
}
#endif

template <Pick kOp>
void halfKernel(Half* __restrict d, const Half* __restrict s, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (haveF16c()) return halfF16c<kOp>(d, s, n);
#endif
  halfScalar<kOp>(d, s, 0, n);
}
void sum_f16(Half* __restrict d, const Half* __restrict s, size_t n) {
  halfKernel<Pick::kSum>(d, s, n);
}
void max_f16(Half* __restrict d, const Half* __restrict s, size_t n) {
  halfKernel<Pick::kMax>(d, s, n);
}
void min_f16(Half* __restrict d, const Half* __restrict s, size_t n) {
  halfKernel<Pick::kMin>(d, s, n);
}

// bfloat16: bit-level widen/narrow (see reduce.h). GCC vectorizes the scalar form only with
// pack/permute shuffles (~5 GB/s); the AVX2 form below keeps the values in 32-bit lanes and
// narrows with one pack per 16 elements (same rounding, same NaN rule).
template <Pick kOp>
void bf16Scalar(uint16_t* __restrict d, const uint16_t* __restrict s, size_t from, size_t n) {
  for (size_t i = from; i < n; ++i) {
    d[i] = floatToBf16(pickScalar<kOp>(bf16ToFloat(d[i]), bf16ToFloat(s[i])));
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx2"))) inline __m256i bf16Round(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  // bits + 0x7fff + ((bits >> 16) & 1), then >> 16: round to nearest, ties to even.
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  // NaN: keep the sign and top payload bits and force the quiet bit, never round to infinity.
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i isNan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet, isNan);
}

__attribute__((target("avx2"))) inline __m256 bf16Widen(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <Pick kOp>
__attribute__((target("avx2"))) inline __m256 applyAvx2(__m256 a, __m256 b) {
  if constexpr (kOp == Pick::kSum) return _mm256_add_ps(a, b);
  // Same NaN rule as maxOf/minOf: take a where a is NaN or a wins, else b.
  const __m256 wins = _mm256_cmp_ps(a, b, kOp == Pick::kMax ? _CMP_GT_OQ : _CMP_LT_OQ);
  return _mm256_blendv_ps(b, a, _mm256_or_ps(wins, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
}

template <Pick kOp>
__attribute__((target("avx2"))) void bf16Avx2(uint16_t* __restrict d, const uint16_t* __restrict s,
                                              size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i dv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + i));
    const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i lo = bf16Round(applyAvx2<kOp>(bf16Widen(_mm256_castsi256_si128(dv)),
                                                bf16Widen(_mm256_castsi256_si128(sv))));
    const __m256i hi = bf16Round(applyAvx2<kOp>(bf16Widen(_mm256_extracti128_si256(dv, 1)),
                                                bf16Widen(_mm256_extracti128_si256(sv, 1))));
    // packus works per 128-bit lane: (lo0, hi0, lo1, hi1) -> reorder quadwords to lo, hi.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), packed);
  }
  bf16Scalar<kOp>(d, s, i, n);
}
#endif

template <Pick kOp>
void bf16Kernel(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (haveAvx2()) return bf16Avx2<kOp>(d, s, n);
#endif
  bf16Scalar<kOp>(d, s, 0, n);
}
void sum_bf16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n) {
  bf16Kernel<Pick::kSum>(d, s, n);
}
void max_bf16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n) {
  bf16Kernel<Pick::kMax>(d, s, n);
}
void min_bf16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n) {
  bf16Kernel<Pick::kMin>(d, s, n);
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
    case ReduceOp::kProduct:
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      break;  // reduceInto handles them before it dispatches
  }
  assert(false && "op reached the sum/max/min dispatch");
}

// Product and the bitwise ops: rare in training (they come from programs' own torch.distributed
// calls, never from a gradient sync), so plain loops, vectorized by the compiler where it can.
template <typename T>
void productLoop(T* __restrict d, const T* __restrict s, size_t n) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap-around, not undefined behaviour
    for (size_t i = 0; i < n; ++i)
      d[i] = static_cast<T>(static_cast<U>(d[i]) * static_cast<U>(s[i]));
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = d[i] * s[i];
  }
}

template <typename T>
void bitwiseLoop(T* __restrict d, const T* __restrict s, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kBand:
      for (size_t i = 0; i < n; ++i) d[i] = d[i] & s[i];
      return;
    case ReduceOp::kBor:
      for (size_t i = 0; i < n; ++i) d[i] = d[i] | s[i];
      return;
    case ReduceOp::kBxor:
      for (size_t i = 0; i < n; ++i) d[i] = d[i] ^ s[i];
      return;
    default:
      assert(false && "not a bitwise op");
  }
}

void productInto(void* dst, const void* src, size_t n, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return productLoop(static_cast<float*>(dst), static_cast<const float*>(src), n);
    case DType::kFloat64:
      return productLoop(static_cast<double*>(dst), static_cast<const double*>(src), n);
    case DType::kInt32:
      return productLoop(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n);
    case DType::kInt64:
      return productLoop(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n);
    case DType::kBFloat16: {  // in float32, rounded once, as the sum is
      auto* d = static_cast<uint16_t*>(dst);
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) d[i] = floatToBf16(bf16ToFloat(d[i]) * bf16ToFloat(s[i]));
      return;
    }
    case DType::kFloat16: {
      auto* d = static_cast<Half*>(dst);
      const auto* s = static_cast<const Half*>(src);
      for (size_t i = 0; i < n; ++i)
        d[i] = static_cast<Half>(static_cast<float>(d[i]) * static_cast<float>(s[i]));
      return;
    }
  }
}

template <typename T>
void divideLoop(T* __restrict d, size_t n, T divisor) {
  for (size_t i = 0; i < n; ++i) d[i] = d[i] / divisor;
}

}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  if (op == ReduceOp::kProduct) return productInto(dst, src, count, dtype);
  if (isBitwise(op)) {
    assert(isIntegral(dtype) && "reduceProblem() refuses bitwise ops on floating dtypes");
    if (dtype == DType::kInt32) {
      return bitwiseLoop(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, op);
    }
    if (dtype == DType::kInt64) {
      return bitwiseLoop(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, op);
    }
    return;
  }
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
