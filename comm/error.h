#pragma once
// Typed communication errors, and the one way comm/ reports a failure.
//
// The rule:
//   1. A call that knows the operation, its sequence number and the peer to blame throws
//      CommError on failure: every collective, the Communicator, the rendezvous and its
//      handshake, the shared-memory offer, the Store. Everything that leaves comm/ for a caller
//      outside it fails this way (a CommError is a std::runtime_error).
//   2. A lower-level call that cannot name those (a socket read does not know which collective it
//      serves), or whose failure is an outcome its caller routinely handles rather than an error
//      (a connection that turns out not to be ours: drop it and keep waiting), returns a Status,
//      or a Result<T> when it also produces a value. Both are [[nodiscard]]; the caller either
//      handles the failure or raises it with the identity it knows: status.raise(op, seq, peer).
//   3. No error travels through out-parameters (`bool* declined`, `std::string* why`) or through
//      a bare bool or null with the reason lost.
//   4. The data path pays nothing for this: a Status that is ok holds no text (no allocation), and
//      the transfer engine throws only on the failure itself, never per chunk.
// A caller's mistake in what it configures (an unknown algorithm or transport name, a malformed
// cost model file) is not a communication failure: it is a std::invalid_argument or
// std::runtime_error whose text names the thing, thrown where the value is parsed.

#include <cassert>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "cumulus/errors.h"

namespace cumulus::comm {

// The error types are public API (<cumulus/errors.h>); ErrorKind is the short name comm uses.
using ErrorKind = cumulus::CommErrorKind;

// The outcome of a call under rule 2: ok, or what kind of failure and what happened (the text
// names no operation or peer; raise() adds them).
class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorKind kind, std::string detail)
      : failed_(true), kind_(kind), detail_(std::move(detail)) {}

  bool ok() const { return !failed_; }
  // Meaningful only when !ok().
  ErrorKind kind() const { return kind_; }
  const std::string& detail() const { return detail_; }

  // Throws CommError(kind(), op, seq, peer, "<context>: <detail>"), or detail() alone when
  // `context` is empty. Only for a failed Status.
  [[noreturn]] void raise(std::string op, uint64_t seq, int peer,
                          const std::string& context = "") const;

 private:
  bool failed_ = false;
  ErrorKind kind_ = ErrorKind::kInvalid;
  std::string detail_;
};

// A value, or the failed Status that says why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}           // NOLINT: implicit, as a return value
  Result(Status failure) : status_(std::move(failure)) {  // NOLINT
    assert(!status_.ok() && "a Result without a value needs a failed Status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // Only when ok().
  T& value() {
    assert(ok());
    return *value_;
  }
  const T& value() const {
    assert(ok());
    return *value_;
  }
  // The value, moved out; a failure is raised as CommError (see Status::raise).
  T orRaise(std::string op, uint64_t seq, int peer, const std::string& context = "") && {
    if (!ok()) status_.raise(std::move(op), seq, peer, context);
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace cumulus::comm
