#include "comm/error.h"

namespace cumulus {

const char* errorKindName(CommErrorKind kind) {
  switch (kind) {
    case CommErrorKind::kTimeout:
      return "timeout";
    case CommErrorKind::kPeerClosed:
      return "peer closed";
    case CommErrorKind::kBadFrame:
      return "bad frame";
    case CommErrorKind::kRendezvous:
      return "rendezvous";
    case CommErrorKind::kUnauthorized:
      return "unauthorized";
    case CommErrorKind::kStore:
      return "store";
    case CommErrorKind::kInvalid:
      return "invalid";
  }
  return "unknown";
}

namespace {

// "allreduce seq 7 with rank 3: timeout: <detail>"; the parts that do not apply are left out.
std::string formatMessage(CommErrorKind kind, const std::string& op, uint64_t seq, int peer,
                          const std::string& detail) {
  std::string text = op.empty() ? std::string("comm") : op;
  text += " seq " + std::to_string(seq);
  if (peer >= 0) text += " with rank " + std::to_string(peer);
  text += ": ";
  text += errorKindName(kind);
  if (!detail.empty()) text += ": " + detail;
  return text;
}

}  // namespace

CommError::CommError(CommErrorKind kind, std::string op, uint64_t seq, int peer,
                     const std::string& detail)
    : std::runtime_error(formatMessage(kind, op, seq, peer, detail)),
      kind_(kind),
      op_(std::move(op)),
      seq_(seq),
      peer_(peer) {}

}  // namespace cumulus

namespace cumulus::comm {

void Status::raise(std::string op, uint64_t seq, int peer, const std::string& context) const {
  assert(failed_ && "raise() of an ok Status");
  throw CommError(kind_, std::move(op), seq, peer,
                  context.empty() ? detail_ : context + ": " + detail_);
}

}  // namespace cumulus::comm
