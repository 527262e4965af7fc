#include "comm/net/handshake.h"

#include <algorithm>
#include <array>

#include "base/hash.h"
#include "comm/error.h"
#include "comm/net/frame.h"

namespace cumulus::comm::net {
namespace {

using base::Digest;
using base::digestEqual;
using base::hmacSha256;
using base::randomBytes;

constexpr uint32_t kHelloMagic = 0x484c4d43;  // "CMLH"
constexpr uint32_t kVersion = 1;  // the low half of the hello's version word; the lane is the high
constexpr size_t kHelloBytes = 40;
constexpr size_t kChallengeBytes = 72;
constexpr size_t kResponseBytes = 40;
constexpr size_t kResultBytes = 8;
// A connection that says nothing cannot hold the acceptor longer than this.
constexpr auto kPerHandshakeLimit = std::chrono::seconds(10);

enum Verdict : uint32_t { kOk = 0, kStale = 1, kBadRank = 2, kDenied = 3 };

using Nonce = std::array<uint8_t, 16>;

Nonce freshNonce() {
  Nonce nonce;
  randomBytes(nonce.data(), nonce.size());
  return nonce;
}

Digest mac(const std::string& token, char side, const Nonce& connectorNonce,
           const Nonce& acceptorNonce, uint64_t generation, int connector, int acceptor, int lane) {
  std::string msg(1, side);
  msg.append(connectorNonce.begin(), connectorNonce.end());
  msg.append(acceptorNonce.begin(), acceptorNonce.end());
  msg += "|" + std::to_string(generation) + "|" + std::to_string(connector) + "|" +
         std::to_string(acceptor) + "|" + std::to_string(lane);
  return hmacSha256(token, msg);
}

// A socket failure of the connector: kTimeout or kPeerClosed, naming the stage.
[[noreturn]] void fail(const Status& status, int peer, const std::string& stage) {
  status.raise("rendezvous", 0, peer, "handshake (" + stage + ")");
}

// A connection the acceptor drops: not one of ours, or gone before it proved it is.
Status rejection(std::string detail) { return Status(ErrorKind::kBadFrame, std::move(detail)); }

}  // namespace

void connectorHandshake(Socket& socket, const HandshakeConfig& self, int peer, Deadline deadline) {
  uint8_t hello[kHelloBytes] = {0};
  const Nonce nonceC = freshNonce();
  storeLe32(hello, kHelloMagic);
  storeLe32(hello + 4, kVersion | static_cast<uint32_t>(self.lane) << 16);
  storeLe64(hello + 8, self.generation);
  storeLe32(hello + 16, static_cast<uint32_t>(self.rank));
  storeLe32(hello + 20, static_cast<uint32_t>(self.world));
  std::copy(nonceC.begin(), nonceC.end(), hello + 24);
  Status st = socket.writeFull(hello, sizeof hello, deadline);
  if (!st.ok()) fail(st, peer, "sending hello");

  uint8_t challenge[kChallengeBytes];
  st = socket.readFull(challenge, sizeof challenge, deadline);
  if (!st.ok()) fail(st, peer, "reading challenge");
  if (loadLe32(challenge) != kHelloMagic) {
    throw CommError(ErrorKind::kBadFrame, "rendezvous", 0, peer,
                    "handshake: the peer's address answered with a non-Cumulus message");
  }
  const uint32_t status = loadLe32(challenge + 4);
  const uint64_t theirGeneration = loadLe64(challenge + 8);
  if (status == kStale) {
    throw CommError(ErrorKind::kBadFrame, "rendezvous", 0, peer,
                    "stale generation: we are generation " + std::to_string(self.generation) +
                        ", the peer is generation " + std::to_string(theirGeneration) +
                        " (this worker belongs to an older or newer group; restart it)");
  }
  if (status != kOk || static_cast<int>(loadLe32(challenge + 16)) != peer) {
    throw CommError(ErrorKind::kBadFrame, "rendezvous", 0, peer,
                    "handshake rejected: the listener is not rank " + std::to_string(peer) +
                        " of a world of " + std::to_string(self.world));
  }
  Nonce nonceA;
  std::copy(challenge + 24, challenge + 40, nonceA.begin());
  Digest macA;
  std::copy(challenge + 40, challenge + 72, macA.begin());

  // Send our proof even when theirs is wrong, so the acceptor reports kUnauthorized too.
  uint8_t response[kResponseBytes] = {0};
  storeLe32(response, kHelloMagic);
  Digest macC = mac(self.token, 'C', nonceC, nonceA, self.generation, self.rank, peer, self.lane);
  std::copy(macC.begin(), macC.end(), response + 8);
  st = socket.writeFull(response, sizeof response, deadline);
  const bool theyKnowToken = digestEqual(
      macA, mac(self.token, 'A', nonceC, nonceA, self.generation, self.rank, peer, self.lane));
  if (!theyKnowToken) {
    throw CommError(ErrorKind::kUnauthorized, "rendezvous", 0, peer,
                    "the peer does not hold this job's token (check CUMULUS_JOB_TOKEN)");
  }
  if (!st.ok()) fail(st, peer, "sending response");
  uint8_t result[kResultBytes];
  st = socket.readFull(result, sizeof result, deadline);
  if (!st.ok()) fail(st, peer, "reading result");
  if (loadLe32(result) != kHelloMagic || loadLe32(result + 4) != kOk) {
    throw CommError(ErrorKind::kUnauthorized, "rendezvous", 0, peer,
                    "the peer rejected our job token (check CUMULUS_JOB_TOKEN)");
  }
}

Result<HandshakePeer> acceptorHandshake(Socket& socket, const HandshakeConfig& self,
                                        Deadline deadline) {
  deadline = std::min(deadline, Clock::now() + kPerHandshakeLimit);
  uint8_t hello[kHelloBytes];
  Status st = socket.readFull(hello, sizeof hello, deadline);
  if (!st.ok()) return rejection("a connection sent no complete hello: " + st.detail());
  const uint32_t version = loadLe32(hello + 4);
  const int lane = static_cast<int>(version >> 16);
  if (loadLe32(hello) != kHelloMagic || (version & 0xffff) != kVersion ||
      (lane != kCollectiveLane && lane != kPointToPointLane)) {
    return rejection("a connection sent a non-Cumulus hello");
  }
  const uint64_t generation = loadLe64(hello + 8);
  const int peer = static_cast<int>(loadLe32(hello + 16));
  const int world = static_cast<int>(loadLe32(hello + 20));
  Nonce nonceC;
  std::copy(hello + 24, hello + 40, nonceC.begin());

  uint8_t challenge[kChallengeBytes] = {0};
  storeLe32(challenge, kHelloMagic);
  storeLe64(challenge + 8, self.generation);
  storeLe32(challenge + 16, static_cast<uint32_t>(self.rank));
  uint32_t status = kOk;
  std::string rejected;
  if (generation != self.generation) {
    status = kStale;
    rejected = "rank " + std::to_string(peer) + " of generation " + std::to_string(generation) +
               " tried to join generation " + std::to_string(self.generation);
  } else if (world != self.world || peer <= self.rank || peer >= self.world) {
    status = kBadRank;
    rejected = "a peer claiming rank " + std::to_string(peer) + " of world " +
               std::to_string(world) + " connected to rank " + std::to_string(self.rank) +
               " of world " + std::to_string(self.world);
  }
  storeLe32(challenge + 4, status);
  const Nonce nonceA = freshNonce();
  std::copy(nonceA.begin(), nonceA.end(), challenge + 24);
  Digest macA = mac(self.token, 'A', nonceC, nonceA, self.generation, peer, self.rank, lane);
  std::copy(macA.begin(), macA.end(), challenge + 40);
  st = socket.writeFull(challenge, sizeof challenge, deadline);
  if (status != kOk) return rejection(rejected);
  if (!st.ok()) {
    return rejection("rank " + std::to_string(peer) + " left during the handshake: " + st.detail());
  }

  uint8_t response[kResponseBytes];
  st = socket.readFull(response, sizeof response, deadline);
  if (!st.ok()) {
    // The connector hangs up without a response only when our proof was wrong for it... or it
    // died. Either way this connection is useless; keep waiting for a good one.
    return rejection("rank " + std::to_string(peer) +
                     " sent no handshake response: " + st.detail());
  }
  Digest macC;
  std::copy(response + 8, response + 40, macC.begin());
  const bool ok = loadLe32(response) == kHelloMagic &&
                  digestEqual(macC, mac(self.token, 'C', nonceC, nonceA, self.generation, peer,
                                        self.rank, lane));
  uint8_t result[kResultBytes];
  storeLe32(result, kHelloMagic);
  storeLe32(result + 4, ok ? kOk : kDenied);
  st = socket.writeFull(result, sizeof result, deadline);
  if (!ok) {
    throw CommError(ErrorKind::kUnauthorized, "rendezvous", 0, peer,
                    "rank " + std::to_string(peer) +
                        " does not hold this job's token (check CUMULUS_JOB_TOKEN)");
  }
  if (!st.ok()) {
    return rejection("rank " + std::to_string(peer) + " left during the handshake: " + st.detail());
  }
  return HandshakePeer{peer, lane};
}

}  // namespace cumulus::comm::net
