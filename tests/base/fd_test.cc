#include "base/fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace cumulus::base {
namespace {

// True while `fd` names an open descriptor of this process.
bool isOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

struct Pipe {
  int read = -1;
  int write = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read = fds[0];
    write = fds[1];
  }
};

TEST(FdTest, ClosesOnDestruction) {
  Pipe p;
  {
    Fd owner(p.read);
    EXPECT_EQ(owner.get(), p.read);
    EXPECT_TRUE(isOpen(p.read));
  }
  EXPECT_FALSE(isOpen(p.read));
  // The writing end sees that the reader has gone (POLLERR), without a SIGPIPE.
  pollfd waiter{p.write, POLLOUT, 0};
  ASSERT_EQ(::poll(&waiter, 1, 0), 1);
  EXPECT_NE(waiter.revents & POLLERR, 0);
  ::close(p.write);
}

TEST(FdTest, ReleaseGivesUpOwnership) {
  Pipe p;
  int released = -1;
  {
    Fd owner(p.read);
    released = owner.release();
    EXPECT_FALSE(owner.valid());
    EXPECT_EQ(owner.get(), -1);
  }
  EXPECT_EQ(released, p.read);
  EXPECT_TRUE(isOpen(p.read));
  ::close(p.read);
  ::close(p.write);
}

TEST(FdTest, ResetClosesTheOldDescriptor) {
  Pipe p;
  Fd owner(p.read);
  owner.reset(p.write);
  EXPECT_FALSE(isOpen(p.read));
  EXPECT_TRUE(isOpen(p.write));
  owner.reset();
  EXPECT_FALSE(isOpen(p.write));
  EXPECT_FALSE(owner.valid());
}

TEST(FdTest, MoveTransfersOwnership) {
  Pipe p;
  Fd a(p.read);
  Fd b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.get(), p.read);
  Fd c(p.write);
  c = std::move(b);  // closes p.write, takes p.read
  EXPECT_FALSE(isOpen(p.write));
  EXPECT_EQ(c.get(), p.read);
  EXPECT_TRUE(isOpen(p.read));
}

TEST(FdTest, CloseReportsTheErrorOnce) {
  Fd none;
  EXPECT_EQ(none.close(), 0);
  Pipe p;
  Fd owner(p.read);
  EXPECT_EQ(owner.close(), 0);
  EXPECT_FALSE(isOpen(p.read));
  EXPECT_EQ(owner.close(), 0);  // nothing owned any more
  // A descriptor that is not open: close fails with EBADF and the owner lets go of it.
  Fd stale(p.read);
  EXPECT_EQ(stale.close(), EBADF);
  EXPECT_FALSE(stale.valid());
  ::close(p.write);
}

}  // namespace
}  // namespace cumulus::base
