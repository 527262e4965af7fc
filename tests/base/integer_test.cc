// base::parseInteger and parseUnsigned: the one strict reader of integers given as text (flags, environment
// variables, Slurm's lists).
#include "base/integer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>

namespace cumulus::base {
namespace {

TEST(ParseIntegerTest, DecimalDigitsWithAnOptionalMinusWithinTheRange) {
  EXPECT_EQ(parseInteger("0"), 0);
  EXPECT_EQ(parseInteger("42"), 42);
  EXPECT_EQ(parseInteger("-7"), -7);
  EXPECT_EQ(parseInteger("007"), 7);
  EXPECT_EQ(parseInteger("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parseInteger("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(parseInteger("5", 5, 5), 5);
}

TEST(ParseIntegerTest, AnythingElseIsNone) {
  for (const char* text : {"", "+5", " 5", "5 ", "5x", "0x10", "1e3", "1.0", "-", "--1", "٣",
                           "9223372036854775808", "-9223372036854775809"}) {
    EXPECT_EQ(parseInteger(text), std::nullopt) << '"' << text << '"';
  }
  EXPECT_EQ(parseInteger("4", 5, 10), std::nullopt);
  EXPECT_EQ(parseInteger("11", 5, 10), std::nullopt);
  EXPECT_EQ(parseInteger(std::string_view("12", 1)), 1);  // a view is read to its end, no further
}

TEST(ParseUnsignedTest, DecimalDigitsUpToTheMaximum) {
  EXPECT_EQ(parseUnsigned("0"), 0u);
  EXPECT_EQ(parseUnsigned("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(parseUnsigned("10", 10), 10u);
  for (const char* text : {"", "-1", "+1", " 1", "1 ", "1x", "0x1", "1e3", "18446744073709551616"}) {
    EXPECT_EQ(parseUnsigned(text), std::nullopt) << '"' << text << '"';
  }
  EXPECT_EQ(parseUnsigned("11", 10), std::nullopt);
}

TEST(ParseIntegerTest, TheProblemNamesTheRangeAndTheText) {
  EXPECT_EQ(integerProblem("two", 1, 4096), "expected an integer in [1, 4096], got \"two\"");
}

}  // namespace
}  // namespace cumulus::base
