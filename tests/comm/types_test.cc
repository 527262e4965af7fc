// DType names and sizes and Buffer (comm/types.h), moved from reduce_test.cc.
#include "comm/types.h"

#include <gtest/gtest.h>

namespace cumulus::comm {
namespace {

TEST(Types, NamesAndSizes) {
  EXPECT_EQ(elementSize(DType::kFloat32), 4u);
  EXPECT_EQ(elementSize(DType::kFloat64), 8u);
  EXPECT_EQ(elementSize(DType::kBFloat16), 2u);
  EXPECT_EQ(elementSize(DType::kFloat16), 2u);
  EXPECT_EQ(elementSize(DType::kInt32), 4u);
  EXPECT_EQ(elementSize(DType::kInt64), 8u);
  EXPECT_STREQ(dtypeName(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(reduceOpName(ReduceOp::kAvg), "avg");
  Buffer b{nullptr, 10, DType::kFloat64};
  EXPECT_EQ(b.bytes(), 80u);
}

}  // namespace
}  // namespace cumulus::comm
