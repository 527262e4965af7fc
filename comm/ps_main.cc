// cumulus-ps: the funnel parameter server as its own process.
//
//   cumulus-ps --world-size N [--host H] [--port P] [--token-env CUMULUS_JOB_TOKEN]
//
// Prints "cumulus-ps listening on H:P" once it accepts calls, serves until SIGTERM or SIGINT,
// then shuts down cleanly (running steps fail with UNAVAILABLE) and exits 0. Exit 2 on a usage
// error, 1 when it cannot listen.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "comm/parameter_server.h"

namespace {

constexpr char kUsage[] =
    "usage: cumulus-ps --world-size N [--host H] [--port P] [--token-env VAR]\n"
    "  --world-size N  number of workers that push each step (required, ≥ 1)\n"
    "  --host H        address to bind (default 127.0.0.1; 0.0.0.0 for every interface)\n"
    "  --port P        port to bind (default 29501; 0 picks a free one)\n"
    "  --token-env VAR environment variable holding the job token (default CUMULUS_JOB_TOKEN)\n";

[[noreturn]] void usageError(const std::string& message) {
  std::fprintf(stderr, "cumulus-ps: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

int parseInt(const std::string& flag, const std::string& text, int min, int max) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < min || value > max)
    usageError(flag + " wants an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
               "], got '" + text + "'");
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char** argv) {
  int world = 0;
  int port = 29501;
  std::string host = "127.0.0.1";
  std::string token_env = "CUMULUS_JOB_TOKEN";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) usageError("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--world-size") {
      world = parseInt(flag, value, 1, 1 << 16);
    } else if (flag == "--port") {
      port = parseInt(flag, value, 0, 65535);
    } else if (flag == "--host") {
      host = value;
    } else if (flag == "--token-env") {
      token_env = value;
    } else {
      usageError("unknown option " + flag);
    }
  }
  if (world == 0) usageError("--world-size is required");
  const char* token = std::getenv(token_env.c_str());
  if (token == nullptr)
    std::fprintf(stderr,
                 "cumulus-ps: warning: %s is not set; accepting only calls without a token\n",
                 token_env.c_str());

  // Block the stop signals before gRPC starts its threads, so that only sigwait() sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    cumulus::comm::ParameterServer server(host, port, token ? token : "", world);
    std::printf("cumulus-ps listening on %s:%d\n", server.host().c_str(), server.port());
    std::fprintf(stderr, "cumulus-ps: world size %d\n", world);
    std::fflush(stdout);
    int signal = 0;
    sigwait(&stop_signals, &signal);
    std::fprintf(stderr, "cumulus-ps: %s received, shutting down\n", strsignal(signal));
    server.shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cumulus-ps: %s; choose another with --port or --host\n", e.what());
    return 1;
  }
  return 0;
}
