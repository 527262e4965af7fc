#pragma once
// Pieces shared by the gRPC services of comm/ (Store, ParameterServer) and their clients:
// the job-token check, channel set-up with bounded messages and short reconnect backoff, and
// the wording of "unreachable" errors. Internal to comm/; not part of the public contract.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace cumulus::comm::rpc {

// Metadata entry that carries the job token on every call.
inline constexpr char kTokenMetadataKey[] = "x-cumulus-token";
// Room for the protobuf framing around a maximal payload.
inline constexpr size_t kMessageSlackBytes = 64 * 1024;
// The longest wait a request may ask for (30 days); longer ones wait this long. Bounds the
// arithmetic on clock values, which a wait of 2^63 ms would overflow.
inline constexpr int64_t kMaxWaitMs = int64_t{30} * 24 * 3600 * 1000;

// Keeps the gRPC library initialized for the rest of the process (once; thread-safe). Without
// it, destroying the last server or channel runs grpc_shutdown(), which joins gRPC's executor
// threads and was measured to block for 10 s when one was still flushing a closed connection.
// makeChannel() and configureServer() call it.
void keepGrpcInitialized();

// Compares in time that depends only on the lengths, not on where the strings differ.
bool tokenEquals(std::string_view expected, std::string_view given);

// OK when the call's x-cumulus-token equals `token` (a missing entry counts as ""), else
// UNAUTHENTICATED. Never says what the expected token is.
grpc::Status checkToken(const grpc::ServerContext& context, const std::string& token);

// "host:port", with brackets around an IPv6 host.
std::string endpoint(const std::string& host, int port);

// "10.0 s"
std::string formatSeconds(std::chrono::steady_clock::duration duration);

// Time left until the client's deadline, as a steady_clock point (far future when none).
std::chrono::steady_clock::time_point steadyDeadline(const grpc::ServerContext& context);

// An insecure channel whose messages are capped at `max_message_bytes` both ways and which
// retries a refused connection every 100 ms to 1 s (gRPC's default backoff grows to 120 s).
std::shared_ptr<grpc::Channel> makeChannel(const std::string& address, int max_message_bytes);

// Applies the same caps to a server, and refuses SO_REUSEPORT so that a taken port is an error.
void configureServer(grpc::ServerBuilder& builder, int max_message_bytes);

// Builds and starts a server for `service` on host:port with configureServer's caps; port 0 picks
// a free port. Writes the bound port to *bound_port. Throws std::runtime_error naming `what` and
// the address if it cannot listen.
std::unique_ptr<grpc::Server> startServer(const std::string& what, const std::string& host,
                                          int port, grpc::Service* service, int max_message_bytes,
                                          int* bound_port);

// True for a status that means "no connection could be made" (the call never reached a server).
bool isConnectFailure(const grpc::Status& status);
// Why no connection could be made to host:port: tries one plain TCP connect (≤ 500 ms) and
// says "connection refused", "connect timed out", "cannot resolve host" …; when TCP connects
// fine, gRPC's own message. gRPC's status text alone is unreliable ("tcp handshaker shutdown").
std::string connectFailureReason(const std::string& host, int port, const grpc::Status& status);

}  // namespace cumulus::comm::rpc
