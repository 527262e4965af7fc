#pragma once
// The connection handshake of the data plane: both ends prove they hold the same job token
// (HMAC-SHA-256 over fresh nonces, so the token never crosses the wire and a recorded handshake
// cannot be replayed) and agree on generation and ranks.
//
//   connector -> acceptor  Hello     {magic 'CMLH', version | lane, generation, rank, world,
//   nonceC} acceptor  -> connector Challenge {magic, status, generation, rank, nonceA, macA}
//   connector -> acceptor  Response  {magic, macC}
//   acceptor  -> connector Result    {magic, status}
// macA = HMAC(token, "A" | nonceC | nonceA | generation | ranks | lane), macC the same with "C".
// The lane says what the connection will carry: kCollectiveLane (the collectives' frames) or
// kPointToPointLane (comm/point_to_point.h); it is in the proof, so it cannot be altered in
// flight.
// A stale or foreign generation is answered with status kStale (the connector raises kBadFrame);
// a wrong token gives kUnauthorized on both ends.
//
// Both calls block until done or the deadline, never longer. Thread-safety: one socket each.

#include <cstdint>
#include <string>

#include "comm/net/socket.h"

namespace cumulus::comm::net {

constexpr int kCollectiveLane = 0;
constexpr int kPointToPointLane = 1;

struct HandshakeConfig {
  uint64_t generation = 0;
  int rank = 0;
  int world = 1;
  std::string token;
  int lane = kCollectiveLane;  // the connector's; the acceptor learns it from the hello
};

// Who the acceptor shook hands with.
struct HandshakePeer {
  int rank = 0;  // > the acceptor's rank
  int lane = kCollectiveLane;
};

// Connector side. Returns normally when the acceptor (rank `peer`) accepted us; otherwise throws
// CommError(op "rendezvous", seq 0, peer): kUnauthorized, kBadFrame (stale generation, garbage),
// kTimeout or kPeerClosed.
void connectorHandshake(Socket& socket, const HandshakeConfig& self, int peer, Deadline deadline);

// Acceptor side. Returns the authenticated peer's rank (> self.rank) and lane. Throws CommError
// kUnauthorized (naming the claimed rank) when a well-formed Hello of our generation carries the
// wrong token: that is a misconfigured member of this job, so the group fails fast. Fails with
// kBadFrame, its detail saying why, for connections that are merely not ours (garbage, stale
// generation, bad rank, silence): the caller closes them and keeps waiting (comm/error.h, rule 2).
Result<HandshakePeer> acceptorHandshake(Socket& socket, const HandshakeConfig& self,
                                        Deadline deadline);

}  // namespace cumulus::comm::net
