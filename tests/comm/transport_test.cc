// Transport choice (comm/transport.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <numeric>
#include <thread>

#include "comm/error.h"
#include "comm/net/socket.h"
#include "comm/rendezvous.h"
#include "group.h"

namespace cumulus::comm {
namespace {

using namespace std::chrono_literals;
using testing::Group;

// Transport choice (comm/transport.h): same-host peers meet over shared memory unless one of them
// asks for AF_UNIX (then AF_UNIX) or TCP (then TCP), by an option or by CUMULUS_TRANSPORT.
TEST(Transport, SameHostPeersUseShmUnlessUnixOrTcpIsAsked) {
  MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(4);
  testing::spawn(4, [&](int r) {
    CommunicatorOptions o;
    o.job_token = "t";
    o.transport = r == 1 ? Transport::kUnix : r == 3 ? Transport::kTcp : Transport::kAuto;
    comms[r] = std::make_unique<Communicator>(r, 4, store, o);
  });
  EXPECT_STREQ(comms[0]->transportTo(2), "shm");
  EXPECT_STREQ(comms[2]->transportTo(0), "shm");
  EXPECT_STREQ(comms[0]->transportTo(1), "unix");  // rank 1 asks for AF_UNIX
  EXPECT_STREQ(comms[2]->transportTo(1), "unix");  // rank 1 offers no shared memory
  EXPECT_STREQ(comms[1]->transportTo(2), "unix");
  EXPECT_STREQ(comms[0]->transportTo(3), "tcp");
  EXPECT_STREQ(comms[3]->transportTo(1), "tcp");
  EXPECT_STREQ(comms[3]->transportTo(3), "self");
  // Mixed carriers in one ring; 64 Ki elements per rank so that the shm pairs use slots.
  const size_t count = 1 << 18;
  std::vector<std::vector<int32_t>> v(4, std::vector<int32_t>(count));
  testing::spawn(4, [&](int r) {
    std::iota(v[r].begin(), v[r].end(), r);
    Buffer b{v[r].data(), v[r].size(), DType::kInt32};
    comms[r]->allreduce(b, {ReduceOp::kSum, Algorithm::kRing});
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(v[r][10], 46) << "rank " << r;
    EXPECT_EQ(v[r][count - 1], int32_t(4 * (count - 1) + 6)) << "rank " << r;
  }
}

TEST(Transport, UnixOrShmToAPeerOnAnotherHostIsARendezvousError) {
  for (Transport transport : {Transport::kUnix, Transport::kShm}) {
    MemoryStore store;  // a rank 0 that lives on another host
    store.set(localKey(0, 0), "some-other-boot-id/host/net\ncumulus/1/2/3");
    store.set(shmKey(0, 0), "some-other-boot-id/host/net\ncumulus/1/2/3/shm");
    store.set(addressKey(0, 0), "127.0.0.1:9");
    CommunicatorOptions o;
    o.transport = transport;
    o.timeout = 2s;
    try {
      Communicator(1, 2, store, o);
      ADD_FAILURE() << "expected a CommError";
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kRendezvous) << e.what();
      EXPECT_EQ(e.peer(), 0);
      const std::string want =
          std::string("transport '") + transportName(transport) + "' cannot reach rank 0";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(Transport, EnvironmentVariableDecidesUnderAuto) {
  EXPECT_EQ(parseTransport("unix"), Transport::kUnix);
  EXPECT_EQ(parseTransport("shm"), Transport::kShm);
  EXPECT_EQ(parseTransport("TCP"), std::nullopt);
  ::setenv("CUMULUS_TRANSPORT", "tcp", 1);
  {
    Group group(2);
    EXPECT_STREQ(group.at(0).transportTo(1), "tcp");
  }
  ::setenv("CUMULUS_TRANSPORT", "bogus", 1);
  MemoryStore store;
  try {
    Communicator(0, 2, store, {});
    ADD_FAILURE() << "expected a CommError";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_NE(std::string(e.what()).find("CUMULUS_TRANSPORT='bogus'"), std::string::npos)
        << e.what();
  }
  ::setenv("CUMULUS_TRANSPORT", "unix", 1);
  {
    Group group(2);
    EXPECT_STREQ(group.at(0).transportTo(1), "unix");
  }
  ::setenv("CUMULUS_TRANSPORT", "shm", 1);
  {
    Group group(2);
    EXPECT_STREQ(group.at(0).transportTo(1), "shm");
  }
  ::unsetenv("CUMULUS_TRANSPORT");
  Group group(2);
  EXPECT_STREQ(group.at(0).transportTo(1), "shm");
}

}  // namespace
}  // namespace cumulus::comm
