#include "comm/rpc_common.h"

#include <grpc/grpc.h>
#include <grpc/support/log.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

#include "base/connect.h"

namespace cumulus::comm::rpc {

void keepGrpcInitialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    // gRPC's own log lines ("chttp2_server.cc:… Address already in use") repeat, in gRPC's terms,
    // an error that Cumulus reports in its own. They reach the console only when a user asks for
    // them with gRPC's documented GRPC_VERBOSITY (or GRPC_TRACE).
    if (std::getenv("GRPC_VERBOSITY") == nullptr && std::getenv("GRPC_TRACE") == nullptr) {
      gpr_set_log_function([](gpr_log_func_args*) {});
    }
    grpc_init();  // deliberately never paired with grpc_shutdown()
  });
}

bool tokenEquals(std::string_view expected, std::string_view given) {
  // Walk the longer string fully; fold every byte difference and the length difference.
  const size_t n = std::max(expected.size(), given.size());
  unsigned char diff = expected.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char a = i < expected.size() ? expected[i] : 0;
    const unsigned char b = i < given.size() ? given[i] : 0;
    diff |= static_cast<unsigned char>(a ^ b);
  }
  return diff == 0;
}

grpc::Status checkToken(const grpc::ServerContext& context, const std::string& token) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(kTokenMetadataKey);
  std::string_view given;
  if (it != metadata.end()) given = std::string_view(it->second.data(), it->second.size());
  if (tokenEquals(token, given)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, it == metadata.end()
                                                             ? "missing job token (x-cumulus-token)"
                                                             : "wrong job token (x-cumulus-token)");
}

std::string endpoint(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[')
    return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string formatSeconds(std::chrono::steady_clock::duration duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(duration).count());
  return text;
}

std::chrono::steady_clock::time_point steadyDeadline(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max())
    return std::chrono::steady_clock::time_point::max();
  const auto left = deadline - std::chrono::system_clock::now();
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
}

std::shared_ptr<grpc::Channel> makeChannel(const std::string& address, int max_message_bytes) {
  keepGrpcInitialized();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Each client gets its own connection: bulk transfers of one rank must not queue behind
  // another rank's on a shared subchannel.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void configureServer(grpc::ServerBuilder& builder, int max_message_bytes) {
  keepGrpcInitialized();
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

std::unique_ptr<grpc::Server> startServer(const std::string& what, const std::string& host,
                                          int port, grpc::Service* service, int max_message_bytes,
                                          int* bound_port) {
  const std::string address = endpoint(host, port);
  grpc::ServerBuilder builder;
  configureServer(builder, max_message_bytes);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), bound_port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *bound_port == 0) {
    throw std::runtime_error(what + " cannot listen on " + address +
                             " (port in use or host not local)");
  }
  return server;
}

namespace {
std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}
}  // namespace

bool isConnectFailure(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  const std::string message = lower(status.error_message());
  return message.find("failed to connect") != std::string::npos ||
         message.find("connection refused") != std::string::npos ||
         message.find("dns resolution failed") != std::string::npos ||
         message.find("name resolution") != std::string::npos;
}

std::string connectFailureReason(const std::string& host, int port, const grpc::Status& status) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const std::string bare =
      host.size() > 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
  if (int rc = getaddrinfo(bare.c_str(), std::to_string(port).c_str(), &hints, &addresses))
    return std::string("cannot resolve host: ") + gai_strerror(rc);
  std::string reason = status.error_message();
  const int error =
      base::connectBefore(addresses->ai_addr, addresses->ai_addrlen,
                          std::chrono::steady_clock::now() + std::chrono::milliseconds(500))
          .error;
  if (error == ETIMEDOUT) {
    reason = "connect timed out";
  } else if (error != 0) {
    reason = lower(std::strerror(error));
  }
  freeaddrinfo(addresses);
  return reason;
}

}  // namespace cumulus::comm::rpc
