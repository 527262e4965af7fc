#include "comm/funnel.h"

#include <grpcpp/grpcpp.h>

#include <cstring>

#include "base/integer.h"
#include "comm/error.h"
#include "comm/parameter_server.h"
#include "comm/rpc_common.h"
#include "proto/parameter_server.grpc.pb.h"

namespace cumulus::comm {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kDeadlineMargin = std::chrono::milliseconds(1000);
constexpr char kOp[] = "allreduce/funnel";
}  // namespace

struct FunnelClient::Impl {
  std::string endpoint;
  std::string host;
  int port;
  std::string token;
  int rank;
  int world;
  uint64_t generation;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<proto::ParameterServer::Stub> stub;

  CommError toError(const grpc::Status& status, const grpc::ClientContext& context, uint64_t seq,
                    Clock::duration elapsed) const {
    int blame = -1;
    const auto& trailers = context.GetServerTrailingMetadata();
    if (auto it = trailers.find("x-cumulus-rank"); it != trailers.end()) {
      // A trailer that is not a whole number names no rank: the error then blames none (-1)
      // rather than hiding the server's status behind a parse error.
      const std::string_view text(it->second.data(), it->second.size());
      blame = static_cast<int>(base::parseInteger(text, 0, INT32_MAX).value_or(-1));
    }
    const std::string where = "parameter server " + endpoint + ": ";
    switch (status.error_code()) {
      case grpc::StatusCode::UNAUTHENTICATED:
        return CommError(ErrorKind::kUnauthorized, kOp, seq, -1,
                         where + status.error_message() + "; check CUMULUS_JOB_TOKEN");
      case grpc::StatusCode::INVALID_ARGUMENT:
        return CommError(ErrorKind::kInvalid, kOp, seq, blame, where + status.error_message());
      case grpc::StatusCode::FAILED_PRECONDITION:
        return CommError(ErrorKind::kBadFrame, kOp, seq, blame, where + status.error_message());
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        if (blame < 0 && channel->GetState(false) != GRPC_CHANNEL_READY)
          return CommError(ErrorKind::kTimeout, kOp, seq, -1,
                           "parameter server " + endpoint + " unreachable for " +
                               rpc::formatSeconds(elapsed) + " (" +
                               rpc::connectFailureReason(host, port, status) + ")");
        return CommError(
            ErrorKind::kTimeout, kOp, seq, blame,
            where + status.error_message() + " (waited " + rpc::formatSeconds(elapsed) + ")");
      case grpc::StatusCode::UNAVAILABLE:
        if (rpc::isConnectFailure(status))
          return CommError(ErrorKind::kPeerClosed, kOp, seq, -1,
                           "parameter server " + endpoint + " unreachable (" +
                               rpc::connectFailureReason(host, port, status) + ")");
        return CommError(ErrorKind::kPeerClosed, kOp, seq, blame, where + status.error_message());
      default:
        return CommError(ErrorKind::kPeerClosed, kOp, seq, blame, where + status.error_message());
    }
  }
};

FunnelClient::FunnelClient(const std::string& host, int port, const std::string& token, int rank,
                           int world, uint64_t generation)
    : endpoint_(rpc::endpoint(host.empty() ? "127.0.0.1" : host, port)),
      impl_(std::make_unique<Impl>()) {
  if (world < 1 || rank < 0 || rank >= world)
    throw CommError(ErrorKind::kInvalid, kOp, 0, -1,
                    "rank " + std::to_string(rank) + " is out of range for world size " +
                        std::to_string(world));
  impl_->endpoint = endpoint_;
  impl_->host = host.empty() ? "127.0.0.1" : host;
  impl_->port = port;
  impl_->token = token;
  impl_->rank = rank;
  impl_->world = world;
  impl_->generation = generation;
  impl_->channel = rpc::makeChannel(
      endpoint_, static_cast<int>(ParameterServer::kChunkBytes + rpc::kMessageSlackBytes));
  impl_->stub = proto::ParameterServer::NewStub(impl_->channel);
}

FunnelClient::~FunnelClient() = default;

uint64_t FunnelClient::allreduce(Buffer& buffer, ReduceOp op, uint64_t seq,
                                 std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  grpc::ClientContext context;
  if (!impl_->token.empty()) context.AddMetadata(rpc::kTokenMetadataKey, impl_->token);
  context.set_deadline(std::chrono::system_clock::now() + timeout + kDeadlineMargin);
  // The server may still be starting (cumulus-ps launched beside the workers): wait for it
  // within the deadline instead of failing at the first refused connection.
  context.set_wait_for_ready(true);
  auto stream = impl_->stub->PushPull(&context);

  const size_t bytes = buffer.bytes();
  const char* data = static_cast<const char*>(buffer.data);
  proto::PushChunk message;
  auto* header = message.mutable_header();
  header->set_generation(impl_->generation);
  header->set_seq(seq);
  header->set_rank(static_cast<uint32_t>(impl_->rank));
  header->set_world(static_cast<uint32_t>(impl_->world));
  header->set_dtype(static_cast<uint32_t>(buffer.dtype));
  header->set_op(static_cast<uint32_t>(op));
  header->set_count(buffer.count);
  header->set_timeout_ms(static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 1)));
  // Push every piece (the first one rides with the header). A failed Write means the call is
  // over; Finish() below says why.
  bool open = true;
  size_t offset = 0;
  uint64_t sent = 0;
  // The last piece goes out with the half-close (WriteLast): one transport operation fewer,
  // which is most of a small all-reduce's cost.
  do {
    const size_t piece = std::min(ParameterServer::kChunkBytes, bytes - offset);
    message.set_data(data + offset, piece);
    offset += piece;
    grpc::WriteOptions options;
    if (offset == bytes) options.set_last_message();
    sent += message.ByteSizeLong();
    open = stream->Write(message, options);
    message.clear_header();
  } while (open && offset < bytes);

  // Pull the result into the caller's buffer.
  size_t filled = 0;
  bool oversized = false;
  proto::PullChunk result;
  while (open && stream->Read(&result)) {
    if (filled + result.data().size() > bytes) {
      oversized = true;
      context.TryCancel();
      break;
    }
    std::memcpy(static_cast<char*>(buffer.data) + filled, result.data().data(),
                result.data().size());
    filled += result.data().size();
  }
  const grpc::Status status = stream->Finish();
  if (oversized)
    throw CommError(ErrorKind::kBadFrame, kOp, seq, -1,
                    "parameter server " + endpoint_ + " sent more than the " +
                        std::to_string(bytes) + " bytes pushed");
  if (!status.ok()) throw impl_->toError(status, context, seq, Clock::now() - start);
  if (filled != bytes)
    throw CommError(ErrorKind::kBadFrame, kOp, seq, -1,
                    "parameter server " + endpoint_ + " returned " + std::to_string(filled) +
                        " of " + std::to_string(bytes) + " bytes");
  return sent;
}

}  // namespace cumulus::comm
