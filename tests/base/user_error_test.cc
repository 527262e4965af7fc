#include "cumulus/errors.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <stdexcept>

namespace cumulus::base {
namespace {

class BadFlag : public UserError {
 public:
  using UserError::UserError;
};

TEST(UserErrorTest, UserErrorsExitTwoAndEverythingElseOne) {
  EXPECT_EQ(exitCodeFor(UserError("fix the config")), 2);
  EXPECT_EQ(exitCodeFor(BadFlag("--x: expected an integer")), 2);
  EXPECT_EQ(exitCodeFor(std::runtime_error("disk on fire")), 1);
  EXPECT_EQ(exitCodeFor(std::logic_error("invariant")), 1);
}

TEST(UserErrorTest, PermanentErrorsExitTwoLikeUserErrors) {
  EXPECT_EQ(exitCodeFor(PermanentError("training diverged at step 7 (loss nan)")), 2);
  EXPECT_EQ(kUserErrorExitCode, 2);
}

TEST(UserErrorTest, FullReadOnlyOrForbiddenFilesArePermanentOtherErrorsAreNot) {
  for (int e : {ENOSPC, EDQUOT, EROFS, EACCES, EPERM}) EXPECT_TRUE(isPermanentFileError(e)) << e;
  for (int e : {0, EIO, EINTR, EAGAIN, ENOENT, ECONNRESET}) EXPECT_FALSE(isPermanentFileError(e)) << e;
}

TEST(UserErrorTest, KeepsItsText) {
  try {
    throw BadFlag("--nnodes: expected MIN:MAX");
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "--nnodes: expected MIN:MAX");
    EXPECT_EQ(exitCodeFor(e), kUserErrorExitCode);
  }
}

}  // namespace
}  // namespace cumulus::base
