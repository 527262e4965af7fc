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

TEST(Reduce, ZeroCountTouchesNothing) {
  reduceInto(nullptr, nullptr, 0, DType::kFloat64, ReduceOp::kSum);
  divideBy(nullptr, 0, DType::kInt64, 3);
}

}  // namespace
}  // namespace cumulus::comm
