// The reduction kernels against values computed independently (double arithmetic, hand-made
// bit patterns).
#include "comm/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace cumulus::comm {
namespace {

TEST(Reduce, Float32AllOpsOddLength) {
  // 37 elements: the vector body and the scalar tail both run.
  const size_t n = 37;
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = float(i) * 0.5f - 3.0f, b[i] = 7.0f - float(i);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    std::vector<float> d = a;
    reduceInto(d.data(), b.data(), n, DType::kFloat32, op);
    for (size_t i = 0; i < n; ++i) {
      double want = op == ReduceOp::kSum   ? double(a[i]) + b[i]
                    : op == ReduceOp::kMax ? std::max(a[i], b[i])
                                           : std::min(a[i], b[i]);
      ASSERT_EQ(d[i], float(want)) << reduceOpName(op) << " at " << i;
    }
  }
}

TEST(Reduce, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> d = {nan, 1.0f, 2.0f}, s = {1.0f, nan, 3.0f};
  reduceInto(d.data(), s.data(), 3, DType::kFloat32, ReduceOp::kMax);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_TRUE(std::isnan(d[1]));
  EXPECT_EQ(d[2], 3.0f);
  std::vector<double> dd = {1.0, nan}, sd = {nan, -1.0};
  reduceInto(dd.data(), sd.data(), 2, DType::kFloat64, ReduceOp::kMin);
  EXPECT_TRUE(std::isnan(dd[0]));
  EXPECT_TRUE(std::isnan(dd[1]));
}

TEST(Reduce, IntegersWrapAndTruncateTowardZero) {
  std::vector<int32_t> d = {std::numeric_limits<int32_t>::max(), -7, 7};
  std::vector<int32_t> s = {1, 0, 0};
  reduceInto(d.data(), s.data(), 3, DType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(d[0], std::numeric_limits<int32_t>::min());
  divideBy(d.data() + 1, 2, DType::kInt32, 2);
  EXPECT_EQ(d[1], -3);  // not -4: truncation toward zero
  EXPECT_EQ(d[2], 3);
  std::vector<int64_t> a = {5, -9, 100}, b = {-6, 4, 100};
  reduceInto(a.data(), b.data(), 3, DType::kInt64, ReduceOp::kMax);
  EXPECT_EQ(a, (std::vector<int64_t>{5, 4, 100}));
  reduceInto(a.data(), b.data(), 3, DType::kInt64, ReduceOp::kMin);
  EXPECT_EQ(a, (std::vector<int64_t>{-6, 4, 100}));
}

TEST(Reduce, ProductOfEveryDTypeAndIntegersWrap) {
  std::vector<float> f = {1.5f, -2.0f, 0.0f}, fs = {2.0f, 3.0f, -1.0f};
  reduceInto(f.data(), fs.data(), 3, DType::kFloat32, ReduceOp::kProduct);
  EXPECT_EQ(f, (std::vector<float>{3.0f, -6.0f, -0.0f}));
  EXPECT_TRUE(std::signbit(f[2]));
  std::vector<double> d = {0.25, 1e200}, ds = {4.0, 1e200};
  reduceInto(d.data(), ds.data(), 2, DType::kFloat64, ReduceOp::kProduct);
  EXPECT_EQ(d[0], 1.0);
  EXPECT_TRUE(std::isinf(d[1]));
  std::vector<int32_t> i = {65536, -3}, is = {65536, 7};
  reduceInto(i.data(), is.data(), 2, DType::kInt32, ReduceOp::kProduct);
  EXPECT_EQ(i, (std::vector<int32_t>{0, -21}));  // 2^32 wraps to 0
  std::vector<int64_t> l = {INT64_C(3037000500), -1}, ls = {INT64_C(3037000500), -1};
  reduceInto(l.data(), ls.data(), 2, DType::kInt64, ReduceOp::kProduct);
  EXPECT_EQ(l[0], static_cast<int64_t>(UINT64_C(3037000500) * UINT64_C(3037000500)));
  EXPECT_EQ(l[1], 1);
  // bfloat16 1.5 (0x3fc0) times 3.0 (0x4040) is 4.5 (0x4090); float16 0.5 (0x3800) times 6.0
  // (0x4600) is 3.0 (0x4200).
  std::vector<uint16_t> b = {0x3fc0}, bs = {0x4040};
  reduceInto(b.data(), bs.data(), 1, DType::kBFloat16, ReduceOp::kProduct);
  EXPECT_EQ(b[0], 0x4090);
  std::vector<uint16_t> h = {0x3800}, hs = {0x4600};
  reduceInto(h.data(), hs.data(), 1, DType::kFloat16, ReduceOp::kProduct);
  EXPECT_EQ(h[0], 0x4200);
}

TEST(Reduce, BitwiseOpsOfIntegers) {
  const std::vector<int32_t> a = {0b1100, -1, 0}, b = {0b1010, 0x0f0f0f0f, 0};
  std::vector<int32_t> d = a;
  reduceInto(d.data(), b.data(), 3, DType::kInt32, ReduceOp::kBand);
  EXPECT_EQ(d, (std::vector<int32_t>{0b1000, 0x0f0f0f0f, 0}));
  d = a;
  reduceInto(d.data(), b.data(), 3, DType::kInt32, ReduceOp::kBor);
  EXPECT_EQ(d, (std::vector<int32_t>{0b1110, -1, 0}));
  d = a;
  reduceInto(d.data(), b.data(), 3, DType::kInt32, ReduceOp::kBxor);
  EXPECT_EQ(d, (std::vector<int32_t>{0b0110, ~0x0f0f0f0f, 0}));
  std::vector<int64_t> l = {INT64_MIN | 5}, ls = {3};
  reduceInto(l.data(), ls.data(), 1, DType::kInt64, ReduceOp::kBxor);
  EXPECT_EQ(l[0], INT64_MIN | 6);
}

TEST(Reduce, BitwiseOpsRefuseFloatingDTypes) {
  EXPECT_EQ(reduceProblem(DType::kFloat32, ReduceOp::kBor),
            "the bitwise op bor needs an integer dtype (int32 or int64), not float32");
  EXPECT_EQ(reduceProblem(DType::kBFloat16, ReduceOp::kBand),
            "the bitwise op band needs an integer dtype (int32 or int64), not bfloat16");
  EXPECT_EQ(reduceProblem(DType::kInt64, ReduceOp::kBxor), "");
  EXPECT_EQ(reduceProblem(DType::kFloat16, ReduceOp::kProduct), "");
}

TEST(Reduce, BFloat16RoundsToNearestEven) {
  // 1.0 = 0x3f80; bf16 spacing at 1 is 2^-7. 1 + 2^-8 is a tie: rounds to even (1.0);
  // 1 + 3·2^-8 is a tie between 0x3f81 and 0x3f82: rounds to even 0x3f82.
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(bf16ToFloat(0xc040), -3.0f);
  const uint16_t nan = floatToBf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16ToFloat(nan)));
  // A signalling-looking NaN whose payload sits in the low bits must not round to infinity.
  uint32_t bits = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &bits, 4);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(snan))));

  // 256 + 1 is not representable (8 bits of mantissa): the sum rounds to even, 256.
  std::vector<uint16_t> d(19, 0x4380 /*256*/), s(19, 0x3f80 /*1*/);
  reduceInto(d.data(), s.data(), d.size(), DType::kBFloat16, ReduceOp::kSum);
  for (uint16_t v : d) ASSERT_EQ(v, 0x4380);
  std::vector<uint16_t> e(19, 0x4040 /*3*/), t(19, 0x4000 /*2*/);
  reduceInto(e.data(), t.data(), e.size(), DType::kBFloat16, ReduceOp::kSum);
  for (uint16_t v : e) ASSERT_EQ(v, 0x40a0);  // 5
  divideBy(e.data(), e.size(), DType::kBFloat16, 2);
  for (uint16_t v : e) ASSERT_EQ(v, 0x4020);  // 2.5
}

TEST(Reduce, Float16SumMaxAvg) {
  // float16 bit patterns: 1.0 = 0x3c00, 2048 = 0x6800, 3 = 0x4200, 1.5 = 0x3e00.
  std::vector<uint16_t> d(21, 0x6800), s(21, 0x3c00);
  reduceInto(d.data(), s.data(), d.size(), DType::kFloat16, ReduceOp::kSum);
  for (uint16_t v : d) ASSERT_EQ(v, 0x6800);  // 2049 ties to even 2048
  std::vector<uint16_t> a(21, 0x4200), b(21, 0xbc00 /*-1*/);
  reduceInto(a.data(), b.data(), a.size(), DType::kFloat16, ReduceOp::kMax);
  for (uint16_t v : a) ASSERT_EQ(v, 0x4200);
  divideBy(a.data(), a.size(), DType::kFloat16, 2);
  for (uint16_t v : a) ASSERT_EQ(v, 0x3e00);
  reduceInto(a.data(), b.data(), a.size(), DType::kFloat16, ReduceOp::kMin);
  for (uint16_t v : a) ASSERT_EQ(v, 0xbc00);
}

// A count of 0 reads and writes nothing: the element beyond is untouched, and null pointers
// (an empty tensor's) are never dereferenced.
TEST(Reduce, ZeroCountTouchesNothing) {
  double dst[2] = {7.0, 8.0};
  const double src[2] = {5.0, 6.0};
  reduceInto(dst, src, 0, DType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(dst[0], 7.0);
  EXPECT_EQ(dst[1], 8.0);
  int64_t quotient[1] = {9};
  divideBy(quotient, 0, DType::kInt64, 3);
  EXPECT_EQ(quotient[0], 9);
  reduceInto(nullptr, nullptr, 0, DType::kFloat64, ReduceOp::kSum);
  divideBy(nullptr, 0, DType::kInt64, 3);
  // The same calls with a count of 1 do change it, so the checks above could fail.
  reduceInto(dst, src, 1, DType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(dst[0], 12.0);
  EXPECT_EQ(dst[1], 8.0);
  divideBy(quotient, 1, DType::kInt64, 3);
  EXPECT_EQ(quotient[0], 3);
}

}  // namespace
}  // namespace cumulus::comm
