#pragma once
// <cumulus/errors.h>: the typed errors of the public API. Every failure of a Cumulus call is one
// of these (or a std::invalid_argument for a precondition the caller broke, named in the call's
// contract), with the text that cumulus-train prints for it.
//
//   std::runtime_error
//   ├── UserError        the user must change something (a flag, a file, an environment
//   │   │                variable, a config value) before trying again: exit 2
//   │   └── GroupError   the torchrun environment or the group's options are missing or wrong
//   ├── PermanentError   the run failed in a way that a retry with the same inputs repeats (the
//   │                    loss diverged, the model's code threw, the disk is full or read-only, a
//   │                    step made no progress): exit 2, so nothing restarts or replaces it
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
  explicit CheckpointError(const std::string& what, int error_number = 0)
      : std::runtime_error(what), error_number_(error_number) {}
  // The errno of the file operation that failed (ENOSPC, EROFS, EIO, ...), or 0 when none did
  // (a checkpoint that does not verify or decode).
  int errorNumber() const { return error_number_; }

 private:
  int error_number_;
};

// A failure that is not the input's fault but would happen again on a restart or in a
// replacement worker: a diverged loss, an exception from the model's own code, ENOSPC, EROFS,
// EDQUOT or EACCES on a file the run must write. The text names the cause and what to change.
// A peer's death or a network error is not permanent: those are CommErrors.
class PermanentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether a failed file operation's errno would fail the same way if retried: the disk is full
// (ENOSPC, EDQUOT), the file system is read-only (EROFS), or permission is denied (EACCES, EPERM).
bool isPermanentFileError(int error_number);

// The exit status of a program that ends because of a UserError or a PermanentError: fix
// something, then retry. cumulus-run ends the job at once on it, whatever --max-restarts allows.
inline constexpr int kUserErrorExitCode = 2;
// The exit status of a program that ends because of any other exception.
inline constexpr int kFailureExitCode = 1;
// EX_TEMPFAIL: preempted after a checkpoint; cumulus-run relaunches without counting a restart.
inline constexpr int kExitPreempted = 75;

// kUserErrorExitCode for a UserError or a PermanentError (or anything derived from them),
// kFailureExitCode otherwise.
int exitCodeFor(const std::exception& error);

}  // namespace cumulus
