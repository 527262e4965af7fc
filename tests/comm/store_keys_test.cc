// The Store's key names are a protocol between processes of possibly different builds: these
// formats change only on purpose, with every reader and writer.

#include "comm/store_keys.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace cumulus::comm {
namespace {

TEST(StoreKeys, DataPlane) {
  EXPECT_EQ(addressKey(0, 0), "gen/0/addr/0");
  EXPECT_EQ(addressKey(12, 7), "gen/12/addr/7");
  EXPECT_EQ(failedKey(12, 7), "gen/12/failed/7");
  EXPECT_EQ(localKey(3, 1), "gen/3/local/1");
  EXPECT_EQ(shmKey(3, 15), "gen/3/shm/15");
  EXPECT_EQ(hostKey(2, 6), "gen/2/host/6");
  EXPECT_EQ(addressKey(std::numeric_limits<uint64_t>::max(), 2), "gen/18446744073709551615/addr/2");
}

TEST(StoreKeys, RendezvousRounds) {
  EXPECT_EQ(roundStateKey(0), "rdzv/0/state");
  EXPECT_EQ(roundSettledKey(4), "rdzv/4/settled");
  EXPECT_EQ(roundComingKey(5, 2), "rdzv/5/coming/2");
  EXPECT_EQ(roundAckKey(10, 3), "rdzv/10/ack/3");
}

TEST(StoreKeys, GroupProtocol) {
  EXPECT_EQ(groupFailedKey(1), "launch/1/failed");
  EXPECT_EQ(groupPermanentKey(7), "launch/7/permanent");
  EXPECT_EQ(groupRegroupKey(2), "launch/2/regroup");
  EXPECT_EQ(groupStoppedKey(3, 0), "launch/3/stopped/0");
  EXPECT_EQ(groupDoneKey(11, 4), "launch/11/done/4");
  EXPECT_EQ(groupParameterServerKey(6), "launch/6/ps_endpoint");
  EXPECT_EQ(groupSlotKey(2, 1, 3), "launch/2/slot/1.3");
  EXPECT_EQ(groupJoinedKey(0), "launch/0/joined");
}

TEST(StoreKeys, InPlaceMembership) {
  EXPECT_EQ(quorumRecordKey(2, 0), "quorum/2/0/record");
  EXPECT_EQ(quorumPresentKey(2, 5, "1.0.3"), "quorum/2/5/present/1.0.3");
  EXPECT_EQ(quorumIdKey(0, 0, 3), "quorum/0/0/id/3");
  EXPECT_EQ(quorumLatestKey(7), "quorum/7/latest");
  EXPECT_EQ(quorumGoneKey(1, "0.1.0"), "quorum/1/gone/0.1.0");
  EXPECT_EQ(quorumTicketsKey(1), "quorum/1/tickets");
  EXPECT_EQ(quorumTicketKey(1, 12), "quorum/1/ticket/12");
  EXPECT_EQ(quorumFinishedKey(4), "quorum/4/finished");
}

TEST(StoreKeys, LiveMetrics) {
  EXPECT_EQ(metricsRecordCountKey(), "metrics/records");
  EXPECT_EQ(metricsRecordKey(12), "metrics/record/12");
  EXPECT_EQ(metricsRankKey(3), "metrics/rank/3");
  EXPECT_EQ(metricsServingKey(), "metrics/serving");
}

// A generation of one space never prefixes another's keys ("gen/1/" is not a prefix of "gen/10/"),
// which is what removePrefix of a stale generation relies on.
TEST(StoreKeys, AGenerationPrefixMatchesOnlyItsOwnKeys) {
  EXPECT_EQ(addressKey(1, 0).rfind("gen/1/", 0), 0u);
  EXPECT_NE(addressKey(10, 0).rfind("gen/1/", 0), 0u);
}

}  // namespace
}  // namespace cumulus::comm
