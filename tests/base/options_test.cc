// The typed options (<cumulus/options.h>): every name parses back to its value, and anything else
// is a UserError that lists the choices and suggests the nearest.
#include "cumulus/options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "cumulus/errors.h"

namespace cumulus {
namespace {

template <class Parse>
std::string userErrorOf(Parse parse) {
  try {
    parse();
  } catch (const UserError& e) {
    return e.what();
  }
  return "no UserError";
}

TEST(Options, AlgorithmNamesRoundTrip) {
  EXPECT_STREQ(algorithmName(Algorithm::kFunnel), "funnel");
  EXPECT_STREQ(algorithmName(Algorithm::kTree), "tree");
  EXPECT_STREQ(algorithmName(Algorithm::kRing), "ring");
  EXPECT_STREQ(algorithmName(Algorithm::kHierarchical), "hierarchical");
  EXPECT_STREQ(algorithmName(Algorithm::kAuto), "auto");
  for (Algorithm a : {Algorithm::kFunnel, Algorithm::kTree, Algorithm::kRing,
                      Algorithm::kHierarchical, Algorithm::kAuto}) {
    EXPECT_EQ(parseAlgorithm(algorithmName(a)), a) << algorithmName(a);
  }
}

TEST(Options, CompressionNamesRoundTrip) {
  EXPECT_STREQ(compressionName(Compression::kNone), "none");
  EXPECT_STREQ(compressionName(Compression::kBf16), "bf16");
  EXPECT_EQ(parseCompression("none"), Compression::kNone);
  EXPECT_EQ(parseCompression("bf16"), Compression::kBf16);
}

TEST(Options, PrecisionNamesRoundTrip) {
  EXPECT_STREQ(precisionName(Precision::kFp32), "fp32");
  EXPECT_STREQ(precisionName(Precision::kBf16), "bf16");
  EXPECT_STREQ(precisionName(Precision::kAuto), "auto");
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kAuto}) {
    EXPECT_EQ(parsePrecision(precisionName(p)), p) << precisionName(p);
  }
}

// The one default deadline, in the two units the structs hold it in.
TEST(Options, TheDefaultTimeoutIsOneMinuteInBothUnits) {
  EXPECT_EQ(kDefaultTimeoutSeconds, 60.0);
  EXPECT_EQ(kDefaultTimeout, std::chrono::seconds(60));
}

TEST(Options, RecoveryNamesRoundTripAndInPlaceIsTheDefault) {
  EXPECT_STREQ(recoveryName(Recovery::kInPlace), "in_place");
  EXPECT_STREQ(recoveryName(Recovery::kRestart), "restart");
  EXPECT_EQ(parseRecovery("restart"), Recovery::kRestart);
  EXPECT_EQ(kDefaultRecovery, Recovery::kInPlace);
  EXPECT_EQ(userErrorOf([] { parseRecovery("inplace"); }),
            "unknown recovery 'inplace': expected one of in_place, restart; did you mean "
            "'in_place'?");
}

// Every table names each value once, and each name reads back as its value.
template <class E>
void expectATableThatRoundTrips(size_t values) {
  const std::vector<std::string_view> names = base::namesOf<E>();
  EXPECT_EQ(names.size(), values);
  for (const auto& [value, name] : enumNames(E{})) {
    EXPECT_EQ(base::valueNamed<E>(name), value) << name;
    EXPECT_STREQ(base::nameOf(value), name);
    EXPECT_EQ(std::count(names.begin(), names.end(), std::string_view(name)), 1) << name;
  }
  EXPECT_EQ(base::valueNamed<E>("no-such-name"), std::nullopt);
}

TEST(Options, EveryPublicTableNamesEachValueOnce) {
  expectATableThatRoundTrips<Algorithm>(5);
  expectATableThatRoundTrips<Compression>(3);
  expectATableThatRoundTrips<Precision>(3);
  expectATableThatRoundTrips<Recovery>(2);
  EXPECT_EQ(base::namesText<Algorithm>(), "funnel, tree, ring, hierarchical, auto");
}

TEST(Options, AnUnknownNameListsTheChoicesAndTheNearest) {
  EXPECT_EQ(userErrorOf([] { parseAlgorithm("rng"); }),
            "unknown algorithm 'rng': expected one of funnel, tree, ring, hierarchical, auto; "
            "did you mean 'ring'?");
  // Case-sensitive, as YAML keys are.
  EXPECT_EQ(userErrorOf([] { parseAlgorithm("Ring"); }),
            "unknown algorithm 'Ring': expected one of funnel, tree, ring, hierarchical, auto; "
            "did you mean 'ring'?");
  EXPECT_EQ(userErrorOf([] { parseAlgorithm("fastest"); }),
            "unknown algorithm 'fastest': expected one of funnel, tree, ring, hierarchical, auto");
  EXPECT_EQ(userErrorOf([] { parseAlgorithm(""); }),
            "unknown algorithm '': expected one of funnel, tree, ring, hierarchical, auto");
  EXPECT_EQ(userErrorOf([] { parseCompression("fp8"); }),
            "unknown compression 'fp8': expected one of none, bf16, int8");
  EXPECT_EQ(userErrorOf([] { parseCompression("bf61"); }),
            "unknown compression 'bf61': expected one of none, bf16, int8; did you mean 'bf16'?");
  EXPECT_EQ(userErrorOf([] { parsePrecision("fp16"); }),
            "unknown precision 'fp16': expected one of fp32, bf16, auto; did you mean 'fp32'?");
  EXPECT_EQ(userErrorOf([] { parsePrecision("mixed"); }),
            "unknown precision 'mixed': expected one of fp32, bf16, auto");
}

}  // namespace
}  // namespace cumulus
