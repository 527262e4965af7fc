// The host layout (comm/topology.h): host order, local indices, uniformity.
#include "comm/topology.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cumulus::comm {
namespace {

TEST(Topology, HostsAreOrderedByTheirLowestRankAndLocalIndicesByRank) {
  const Topology t({"b", "b", "a", "c", "a", "b"});
  EXPECT_EQ(t.world(), 6);
  ASSERT_EQ(t.hosts(), 3);
  EXPECT_EQ(t.ranksOn(0), (std::vector<int>{0, 1, 5}));  // "b": rank 0's host comes first
  EXPECT_EQ(t.ranksOn(1), (std::vector<int>{2, 4}));
  EXPECT_EQ(t.ranksOn(2), (std::vector<int>{3}));
  const int hostOf[] = {0, 0, 1, 2, 1, 0};
  const int localOf[] = {0, 1, 0, 0, 1, 2};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(t.hostOf(r), hostOf[r]) << "rank " << r;
    EXPECT_EQ(t.localIndexOf(r), localOf[r]) << "rank " << r;
  }
  EXPECT_FALSE(t.uniform());
  EXPECT_EQ(t.localSize(), 0);
}

TEST(Topology, UniformLayoutsKnowTheirRanksPerHost) {
  const Topology interleaved({"x", "y", "x", "y", "x", "y"});
  EXPECT_TRUE(interleaved.uniform());
  EXPECT_EQ(interleaved.hosts(), 2);
  EXPECT_EQ(interleaved.localSize(), 3);
  EXPECT_EQ(interleaved.ranksOn(1), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(interleaved.localIndexOf(5), 2);

  const Topology oneHost({"h", "h", "h"});
  EXPECT_EQ(oneHost.hosts(), 1);
  EXPECT_EQ(oneHost.localSize(), 3);

  const Topology alone;
  EXPECT_EQ(alone.world(), 1);
  EXPECT_EQ(alone.hosts(), 1);
  EXPECT_EQ(alone.localSize(), 1);
  EXPECT_EQ(alone.hostOf(0), 0);
}

TEST(Topology, AnEmptyWorldIsRefused) {
  EXPECT_THROW(Topology(std::vector<std::string>{}), std::invalid_argument);
}

}  // namespace
}  // namespace cumulus::comm
