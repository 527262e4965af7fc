// The connection set-up of the data plane on hostile bytes: the transport handshake
// (comm/net/handshake.h) on both sides, and the shared-memory offer (comm/shm/channel.h accept())
// that follows it between ranks of one host. Byte 0 picks the part; the rest is what the peer
// sends, on a socket pair (no network).
//   0: acceptor; the peer sends hello and response.  1: connector; the peer sends challenge and
//   result.  2: shm accept of an offer without descriptors.  3: shm accept of an offer carrying a
//   memfd and two eventfds; bytes 1-2 choose the memfd's size (the exact size the offered geometry
//   needs when it fits in 4 MiB and byte 1 is odd), then bytes 3-26 are the offer message, and
//   what follows is written into the segment, where the receiver's first slot stamp lies.
// Expected answers: CommError, or -1 with a reason (acceptor), or null with a reason (shm). The
// peer never knows the token, so a handshake that succeeds is a finding.

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "comm/error.h"
#include "comm/net/frame.h"
#include "comm/net/handshake.h"
#include "comm/shm/channel.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/wire.h"

namespace {

namespace net = cumulus::comm::net;
namespace shm = cumulus::comm::shm;
using cumulus::fuzz::check;

constexpr size_t kOfferBytes = 24;

net::Deadline soon() { return net::Clock::now() + std::chrono::seconds(2); }

void acceptor(const uint8_t* data, size_t size) {
  cumulus::fuzz::Wire wire(data, size);
  net::HandshakeConfig self{5, 0, 4, "fuzz-token"};
  try {
    const cumulus::comm::Result<net::HandshakePeer> peer =
        net::acceptorHandshake(wire.ours, self, soon());
    if (peer.ok()) {
      cumulus::fuzz::finding("the acceptor let in rank " + std::to_string(peer.value().rank) +
                             " without the token");
    }
    check(!peer.status().detail().empty(), "the acceptor refused a connection without saying why");
  } catch (const cumulus::CommError& e) {
    check(e.kind() == cumulus::comm::ErrorKind::kUnauthorized,
          std::string("the acceptor threw other than kUnauthorized: ") + e.what());
  }
}

void connector(const uint8_t* data, size_t size) {
  cumulus::fuzz::Wire wire(data, size);
  net::HandshakeConfig self{5, 1, 4, "fuzz-token"};
  try {
    net::connectorHandshake(wire.ours, self, 0, soon());
  } catch (const cumulus::CommError&) {
    return;
  }
  cumulus::fuzz::finding("the connector accepted a peer that does not know the token");
}

void shmAccept(const uint8_t* data, size_t size) {
  cumulus::fuzz::Wire wire(data, size);
  const cumulus::comm::Result<std::unique_ptr<shm::Channel>> channel =
      shm::Channel::accept(wire.ours, soon());
  // Declined (ok, null) or refused (a failure that says why).
  check(!channel.ok() || !channel.value(), "accepted a shared-memory offer without descriptors");
  check(channel.ok() || !channel.status().detail().empty(), "refused an offer without saying why");
}

// The segment size that Channel::accept requires for this geometry (channel.cc's layout: per
// ring a 192-byte control block and a 24-byte stamp per slot, rounded up to a page, then slots).
uint64_t segment_bytes(uint32_t slots, uint64_t slotBytes) {
  const uint64_t head = (192 + uint64_t{slots} * 24 + 4095) / 4096 * 4096;
  return 2 * (head + slots * slotBytes);
}

void shmAcceptWithFds(const uint8_t* data, size_t size) {
  if (size < 2 + kOfferBytes) return;
  const uint8_t sizeChoice = data[0];
  const uint8_t* offer = data + 2;
  const uint32_t slots = net::loadLe32(offer + 8);
  const uint64_t slotBytes = net::loadLe64(offer + 16);
  uint64_t memfdBytes = (uint64_t{data[0]} << 8 | data[1]) * 64;
  if (sizeChoice % 2 == 1 && slots <= 64 && slotBytes <= (4u << 20)) {
    const uint64_t exact = segment_bytes(slots, slotBytes);
    if (exact <= (4u << 20)) memfdBytes = exact;
  }
  const int memfd = ::memfd_create("cumulus-fuzz", MFD_CLOEXEC);
  const int credit0 = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int credit1 = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  check(memfd >= 0 && credit0 >= 0 && credit1 >= 0, "memfd_create or eventfd failed");
  check(::ftruncate(memfd, static_cast<off_t>(memfdBytes)) == 0, "ftruncate failed");
  const uint8_t* segment = data + 2 + kOfferBytes;
  const size_t segmentSize = size - 2 - kOfferBytes;
  if (segmentSize > 0 && memfdBytes > 0) {
    [[maybe_unused]] ssize_t n =
        ::pwrite(memfd, segment, std::min<uint64_t>(segmentSize, memfdBytes), 0);
  }

  int pair[2];
  check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0,
        "socketpair failed");
  net::Socket ours(pair[0]);
  const int fds[3] = {memfd, credit0, credit1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{const_cast<uint8_t*>(offer), kOfferBytes};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(cm), fds, sizeof fds);
  check(::sendmsg(pair[1], &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(kOfferBytes),
        "sendmsg failed");
  for (int fd : fds) ::close(fd);  // the receiver holds its own copies now
  ::shutdown(pair[1], SHUT_WR);

  cumulus::comm::Result<std::unique_ptr<shm::Channel>> accepted =
      shm::Channel::accept(ours, soon());
  ::close(pair[1]);
  if (!accepted.ok()) {
    check(!accepted.status().detail().empty(),
          "refused an offer with descriptors without saying why");
    return;
  }
  check(accepted.value() != nullptr, "took an offer with descriptors for a decline");
  std::unique_ptr<shm::Channel> channel = std::move(accepted.value());
  check(channel->slots() == slots && channel->slotBytes() == slotBytes,
        "the channel's geometry differs from the offer's");
  // The stamps come from the (fuzzed) segment: front() must refuse or return a slot inside it.
  const cumulus::comm::Result<const void*> slot = channel->front(0, 0, 0);
  check(slot.ok() || !slot.status().detail().empty(), "front() refused a slot without saying why");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 4) {
    case 0:
      acceptor(data + 1, size - 1);
      break;
    case 1:
      connector(data + 1, size - 1);
      break;
    case 2:
      shmAccept(data + 1, size - 1);
      break;
    default:
      shmAcceptWithFds(data + 1, size - 1);
      break;
  }
  return 0;
}
