#pragma once
// Typed communication errors. Every failure of a collective names the operation, its sequence
// number and the peer rank involved, so a user can tell which machine to look at.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace cumulus::comm {

enum class ErrorKind {
  kTimeout,       // a peer did not send or receive within the operation's timeout
  kPeerClosed,    // the connection to a peer closed or reset
  kBadFrame,      // wrong magic, wrong length, stale generation, unexpected tag/sequence
  kRendezvous,    // a peer never published its address, or the Store failed
  kUnauthorized,  // wrong or missing job token
  kStore,         // the Store is unreachable or answered an error
  kInvalid,       // the caller's mistake (bad root, mismatched counts, …)
};

const char* errorKindName(ErrorKind kind);

class CommError : public std::runtime_error {
 public:
  // peer = -1 when no single peer is to blame (e.g. the Store).
  CommError(ErrorKind kind, std::string op, uint64_t seq, int peer, const std::string& detail);

  ErrorKind kind() const { return kind_; }
  const std::string& op() const { return op_; }
  uint64_t seq() const { return seq_; }
  int peer() const { return peer_; }

 private:
  ErrorKind kind_;
  std::string op_;
  uint64_t seq_;
  int peer_;
};

}  // namespace cumulus::comm
