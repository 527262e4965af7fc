#include "comm/store_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "comm/error.h"
#include "comm/rpc_common.h"
#include "comm/store_server.h"
#include "proto/store.grpc.pb.h"

namespace cumulus::comm {

namespace {
using Clock = std::chrono::steady_clock;
// Extra client deadline beyond a blocking call's wait, so the server's "missing" answer wins.
constexpr auto kWaitMargin = std::chrono::milliseconds(2000);

std::string joinKeys(const google::protobuf::RepeatedPtrField<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) out += (out.empty() ? "'" : ", '") + key + "'";
  return out;
}
}  // namespace

struct StoreClient::Impl {
  std::string endpoint;
  std::string host;
  int port;
  std::string token;
  StoreClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<proto::Store::Stub> stub;

  // One unary call with retries while the server cannot be reached. `wait` extends the
  // deadline for blocking calls. `idempotent` allows a retry after an ambiguous UNAVAILABLE.
  template <class Request, class Response, class Method>
  Response call(const char* op, Method method, const Request& request,
                std::chrono::milliseconds wait, bool idempotent) {
    const auto start = Clock::now();
    auto backoff = std::chrono::milliseconds(20);
    for (;;) {
      grpc::ClientContext context;
      if (!token.empty()) context.AddMetadata(rpc::kTokenMetadataKey, token);
      context.set_deadline(std::chrono::system_clock::now() + options.rpc_timeout + wait);
      Response response;
      const grpc::Status status = (stub.get()->*method)(&context, request, &response);
      if (status.ok()) return response;
      const bool retryable = status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                             (idempotent || rpc::isConnectFailure(status));
      const auto elapsed = Clock::now() - start;
      if (retryable && elapsed < options.connect_timeout) {
        std::this_thread::sleep_for(
            std::min<Clock::duration>(backoff, options.connect_timeout - elapsed));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
        continue;
      }
      throw toError(op, status, elapsed);
    }
  }

  CommError toError(const char* op, const grpc::Status& status, Clock::duration elapsed) const {
    switch (status.error_code()) {
      case grpc::StatusCode::UNAUTHENTICATED:
        return CommError(ErrorKind::kUnauthorized, op, 0, -1,
                         "store " + endpoint + " rejected the call: " + status.error_message() +
                             "; check CUMULUS_JOB_TOKEN");
      case grpc::StatusCode::INVALID_ARGUMENT:
        return CommError(ErrorKind::kInvalid, op, 0, -1,
                         "store " + endpoint + ": " + status.error_message());
      case grpc::StatusCode::UNAVAILABLE:
        return CommError(ErrorKind::kStore, op, 0, -1,
                         "store " + endpoint + " unreachable for " + rpc::formatSeconds(elapsed) +
                             " (" + rpc::connectFailureReason(host, port, status) + ")");
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return CommError(
            ErrorKind::kStore, op, 0, -1,
            "store " + endpoint + " did not answer within " + rpc::formatSeconds(elapsed));
      default:
        return CommError(ErrorKind::kStore, op, 0, -1,
                         "store " + endpoint + ": " + status.error_message());
    }
  }

  void checkValue(const char* op, const std::string& key, const Bytes& value) const {
    if (value.size() > StoreServer::kMaxValueBytes)
      throw CommError(ErrorKind::kInvalid, op, 0, -1,
                      "value for key '" + key + "' is " + std::to_string(value.size()) +
                          " bytes; the store holds at most " +
                          std::to_string(StoreServer::kMaxValueBytes));
  }
};

StoreClient::StoreClient(const std::string& host, int port, const std::string& token,
                         StoreClientOptions options)
    : endpoint_(rpc::endpoint(host.empty() ? "127.0.0.1" : host, port)),
      impl_(std::make_unique<Impl>()) {
  impl_->endpoint = endpoint_;
  impl_->host = host.empty() ? "127.0.0.1" : host;
  impl_->port = port;
  impl_->token = token;
  impl_->options = options;
  impl_->channel = rpc::makeChannel(
      endpoint_, static_cast<int>(StoreServer::kMaxValueBytes + rpc::kMessageSlackBytes));
  impl_->stub = proto::Store::NewStub(impl_->channel);
}

StoreClient::~StoreClient() = default;

void StoreClient::set(const std::string& key, const Bytes& value) {
  impl_->checkValue("store.set", key, value);
  proto::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  impl_->call<proto::SetRequest, proto::SetResponse>("store.set", &proto::Store::Stub::Set, request,
                                                     {}, true);
}

Bytes StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  proto::GetRequest request;
  request.set_key(key);
  request.set_wait_ms(std::max<int64_t>(timeout.count(), 0));
  const auto start = Clock::now();
  auto response = impl_->call<proto::GetRequest, proto::GetResponse>(
      "store.get", &proto::Store::Stub::Get, request, timeout + kWaitMargin, true);
  if (!response.found())
    throw CommError(ErrorKind::kTimeout, "store.get", 0, -1,
                    "key '" + key + "' still missing after " +
                        rpc::formatSeconds(Clock::now() - start) + " on store " + endpoint_);
  return std::move(*response.mutable_value());
}

std::optional<Bytes> StoreClient::tryGet(const std::string& key) {
  proto::GetRequest request;
  request.set_key(key);
  auto response = impl_->call<proto::GetRequest, proto::GetResponse>(
      "store.get", &proto::Store::Stub::Get, request, {}, true);
  if (!response.found()) return std::nullopt;
  return std::move(*response.mutable_value());
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  proto::AddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  return impl_
      ->call<proto::AddRequest, proto::AddResponse>("store.add", &proto::Store::Stub::Add, request,
                                                    {}, false)
      .value();
}

Bytes StoreClient::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  impl_->checkValue("store.compareSet", key, desired);
  proto::CompareSetRequest request;
  request.set_key(key);
  request.set_expected(expected);
  request.set_desired(desired);
  // A repeated compare-and-set leaves the same state, so a retry is safe.
  auto response = impl_->call<proto::CompareSetRequest, proto::CompareSetResponse>(
      "store.compareSet", &proto::Store::Stub::CompareSet, request, {}, true);
  return std::move(*response.mutable_value());
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  proto::WaitRequest request;
  for (const auto& key : keys) request.add_keys(key);
  request.set_wait_ms(std::max<int64_t>(timeout.count(), 0));
  const auto start = Clock::now();
  auto response = impl_->call<proto::WaitRequest, proto::WaitResponse>(
      "store.wait", &proto::Store::Stub::Wait, request, timeout + kWaitMargin, true);
  if (response.missing_size() > 0)
    throw CommError(ErrorKind::kTimeout, "store.wait", 0, -1,
                    std::to_string(response.missing_size()) + " of " + std::to_string(keys.size()) +
                        " keys still missing after " + rpc::formatSeconds(Clock::now() - start) +
                        " on store " + endpoint_ + ": " + joinKeys(response.missing()));
}

bool StoreClient::remove(const std::string& key) {
  proto::DeleteRequest request;
  request.set_key(key);
  return impl_
      ->call<proto::DeleteRequest, proto::DeleteResponse>(
          "store.remove", &proto::Store::Stub::Delete, request, {}, true)
      .existed();
}

int64_t StoreClient::removePrefix(const std::string& prefix) {
  proto::DeletePrefixRequest request;
  request.set_prefix(prefix);
  return impl_
      ->call<proto::DeletePrefixRequest, proto::DeletePrefixResponse>(
          "store.removePrefix", &proto::Store::Stub::DeletePrefix, request, {}, true)
      .removed();
}

}  // namespace cumulus::comm
