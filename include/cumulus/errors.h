#pragma once
// <cumulus/errors.h>: the typed errors of the public API. Every failure of a Cumulus call is one
// of these (or a std::invalid_argument for a precondition the caller broke, named in the call's
// contract), with the text that cumulus-train prints for it.
//
//   std::runtime_error
//   ├── UserError        the user must change something (a flag, a file, an environment
//   │   │                variable, a config value) before trying again: exit 2
//   │   └── GroupError   the torchrun environment or the group's options are missing or wrong
//   ├── CommError        a collective, the rendezvous or the Store failed: op, sequence number,
//   │                    peer and kind are fields as well as text. The group is broken afterwards.
//   └── CheckpointError  a checkpoint did not commit, does not verify, or does not fit what it is
//                        restored into; the text names the path and the cause
//
// exitCodeFor() maps an exception to the exit status cumulus-run and the shell understand.
// Thread-safety: the classes are values; exitCodeFor is pure.

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

namespace cumulus {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GroupError : public UserError {
 public:
  using UserError::UserError;
};

// What went wrong in a CommError.
enum class CommErrorKind {
  kTimeout,       // a peer did not send or receive within the operation's timeout
  kPeerClosed,    // the connection to a peer closed or reset (the peer died, or failed itself)
  kBadFrame,      // wrong magic, wrong length, stale generation, unexpected tag or sequence
  kRendezvous,    // a peer never published its address, or the Store failed during it
  kUnauthorized,  // wrong or missing job token (CUMULUS_JOB_TOKEN)
  kStore,         // the Store is unreachable or answered an error
  kInvalid,       // the caller's mistake: a bad root, mismatched counts, an unsupported dtype
};

// "timeout", "peer closed", "bad frame", "rendezvous", "unauthorized", "store", "invalid".
const char* errorKindName(CommErrorKind kind);

// what() is "<op> seq <n> with rank <peer>: <kind>: <detail>", e.g.
// "allreduce seq 7 with rank 3: peer closed: recv failed: Connection reset by peer".
class CommError : public std::runtime_error {
 public:
  // peer = -1 when no single peer is to blame (the Store, for instance).
  CommError(CommErrorKind kind, std::string op, uint64_t seq, int peer, const std::string& detail);

  CommErrorKind kind() const { return kind_; }
  const std::string& op() const { return op_; }  // "allreduce", "broadcast", "rendezvous", ...
  uint64_t seq() const { return seq_; }          // the collective's sequence number in the group
  int peer() const { return peer_; }             // the rank to blame, or -1

 private:
  CommErrorKind kind_;
  std::string op_;
  uint64_t seq_;
  int peer_;
};

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The exit status of a program that ends because of a UserError: fix something, then retry.
inline constexpr int kUserErrorExitCode = 2;
// The exit status of a program that ends because of any other exception.
inline constexpr int kFailureExitCode = 1;
// EX_TEMPFAIL: preempted after a checkpoint; cumulus-run relaunches without counting a restart.
inline constexpr int kExitPreempted = 75;

// kUserErrorExitCode for a UserError (or anything derived from it), kFailureExitCode otherwise.
int exitCodeFor(const std::exception& error);

}  // namespace cumulus
