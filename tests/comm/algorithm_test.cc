// Algorithm names (comm/algorithm.h): every name parses back to its algorithm, and an unknown one
// is a user error that lists the valid names.
#include "comm/algorithm.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cumulus::comm {
namespace {

TEST(Algorithm, NamesRoundTrip) {
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

TEST(Algorithm, UnknownNameListsTheValidOnes) {
  try {
    parseAlgorithm("Ring");  // names are case-sensitive
    FAIL() << "'Ring' parsed";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown communication algorithm 'Ring': expected one of funnel, tree, ring, "
                 "hierarchical, auto");
  }
}

}  // namespace
}  // namespace cumulus::comm
