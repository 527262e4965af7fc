#include "base/connect.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace cumulus::base {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// A TCP socket bound to 127.0.0.1 on a port the kernel picks; listening when `backlog` >= 0.
struct Loopback {
  Fd fd;
  sockaddr_in address{};

  explicit Loopback(int backlog) : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    socklen_t size = sizeof address;
    EXPECT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &size), 0);
    if (backlog >= 0) EXPECT_EQ(::listen(fd.get(), backlog), 0);
  }
  Connected connect(milliseconds wait) const {
    return connectBefore(reinterpret_cast<const sockaddr*>(&address), sizeof address,
                         steady_clock::now() + wait);
  }
};

TEST(ConnectTest, ConnectsToAListener) {
  Loopback server(/*backlog=*/4);
  Connected c = server.connect(milliseconds(5000));
  ASSERT_EQ(c.error, 0);
  ASSERT_TRUE(c.fd.valid());
  Fd accepted(::accept(server.fd.get(), nullptr, nullptr));
  ASSERT_TRUE(accepted.valid());
  const char byte = 'k';
  ASSERT_EQ(::write(c.fd.get(), &byte, 1), 1);
  char got = 0;
  ASSERT_EQ(::read(accepted.get(), &got, 1), 1);
  EXPECT_EQ(got, 'k');
}

TEST(ConnectTest, ClosedPortIsRefusedAtOnce) {
  Loopback bound(/*backlog=*/-1);  // bound, not listening: the kernel answers with a reset
  const auto start = steady_clock::now();
  Connected c = bound.connect(milliseconds(5000));
  EXPECT_EQ(c.error, ECONNREFUSED);
  EXPECT_FALSE(c.fd.valid());
  EXPECT_LT(steady_clock::now() - start, milliseconds(2000));
}

// A listener whose accept queue is full drops further SYNs, so those connects stay in progress
// until the deadline ends them: the deadline, not the kernel's minutes-long retry, decides.
TEST(ConnectTest, HonoursTheDeadlineWhenThePeerDoesNotAnswer) {
  Loopback server(/*backlog=*/0);
  std::vector<Connected> queued;
  const milliseconds wait(300);
  for (int attempt = 0; attempt < 16; ++attempt) {
    const auto start = steady_clock::now();
    Connected c = server.connect(wait);
    const auto took = steady_clock::now() - start;
    if (c.error == ETIMEDOUT) {
      EXPECT_FALSE(c.fd.valid());
      EXPECT_GE(took, wait);
      EXPECT_LT(took, wait + milliseconds(1500));
      return;
    }
    ASSERT_EQ(c.error, 0) << "attempt " << attempt;
    queued.push_back(std::move(c));
  }
  FAIL() << "16 connects to a listener with backlog 0 all succeeded";
}

}  // namespace
}  // namespace cumulus::base
