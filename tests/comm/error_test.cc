// comm/error.h: the text of a CommError, and Status / Result, the returned form of a failure that
// the caller raises with the operation, sequence number and peer it knows.
#include "comm/error.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace cumulus::comm {
namespace {

TEST(CommError, TextNamesOpSeqPeerAndKind) {
  const CommError e(ErrorKind::kTimeout, "allreduce", 7, 3, "no progress");
  EXPECT_STREQ(e.what(), "allreduce seq 7 with rank 3: timeout: no progress");
  EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
  EXPECT_EQ(e.op(), "allreduce");
  EXPECT_EQ(e.seq(), 7u);
  EXPECT_EQ(e.peer(), 3);
  // No op, no peer, no detail: the parts that do not apply are left out.
  EXPECT_STREQ(CommError(ErrorKind::kStore, "", 0, -1, "").what(), "comm seq 0: store");
}

TEST(Status, OkByDefaultAndRaisedWithTheCallersIdentity) {
  EXPECT_TRUE(Status().ok());
  const Status failed(ErrorKind::kPeerClosed, "connection closed by the peer");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.kind(), ErrorKind::kPeerClosed);
  EXPECT_EQ(failed.detail(), "connection closed by the peer");
  try {
    failed.raise("rendezvous", 0, 2, "handshake (reading challenge)");
    FAIL() << "raise() returned";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(),
                 "rendezvous seq 0 with rank 2: peer closed: handshake (reading challenge): "
                 "connection closed by the peer");
    EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed);
    EXPECT_EQ(e.peer(), 2);
  }
  try {
    failed.raise("broadcast", 4, 1);
    FAIL() << "raise() returned";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(),
                 "broadcast seq 4 with rank 1: peer closed: connection closed by the peer");
  }
}

TEST(Result, HoldsTheValueOrTheFailure) {
  Result<std::unique_ptr<int>> value(std::make_unique<int>(42));
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value.value(), 42);
  std::unique_ptr<int> taken = std::move(value).orRaise("allgather", 1, 0);
  EXPECT_EQ(*taken, 42);

  Result<int> failure(Status(ErrorKind::kTimeout, "no connection arrived before the deadline"));
  EXPECT_FALSE(failure.ok());
  EXPECT_EQ(failure.status().kind(), ErrorKind::kTimeout);
  try {
    static_cast<void>(std::move(failure).orRaise("rendezvous", 0, -1, "accepting"));
    FAIL() << "orRaise() of a failure returned";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(),
                 "rendezvous seq 0: timeout: accepting: no connection arrived before the deadline");
  }
}

}  // namespace
}  // namespace cumulus::comm
