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

#include "base/command_line.h"
#include "base/env_names.h"
#include "comm/parameter_server.h"

namespace {

constexpr const char* kProgram = "cumulus-ps";

struct PsFlags {
  int world = 0;
  int port = 29501;
  std::string host = "127.0.0.1";
  std::string token_env = cumulus::base::env::kJobToken;
};

int serve(const PsFlags& flags) {
  const char* token = std::getenv(flags.token_env.c_str());
  if (token == nullptr)
    std::fprintf(stderr,
                 "cumulus-ps: warning: %s is not set; accepting only calls without a token\n",
                 flags.token_env.c_str());

  // Block the stop signals before gRPC starts its threads, so that only sigwait() sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    cumulus::comm::ParameterServer server(flags.host, flags.port, token ? token : "", flags.world);
    std::printf("cumulus-ps listening on %s:%d\n", server.host().c_str(), server.port());
    std::fprintf(stderr, "cumulus-ps: world size %d\n", flags.world);
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

int run(int argc, char** argv) {
  namespace base = cumulus::base;
  CLI::App app{"Serves the funnel's parameter server as its own process.", kProgram};
  base::setUpCommandLine(app, "0 stopped by SIGTERM or SIGINT, 1 cannot listen, 2 usage");
  PsFlags flags;
  app.add_option("--world-size", flags.world, "number of workers that push each step")
      ->type_name("N")
      ->required()
      ->transform(base::integerIn(1, 1 << 16));
  app.add_option("--host", flags.host,
                 "address to bind (default 127.0.0.1; 0.0.0.0 for every interface)")
      ->type_name("H")
      ->check(base::nonEmpty("address"));
  app.add_option("--port", flags.port, "port to bind (default 29501; 0 picks a free one)")
      ->type_name("P")
      ->transform(base::integerIn(0, 65535));
  app.add_option("--token-env", flags.token_env,
                 "environment variable holding the job token (default CUMULUS_JOB_TOKEN)")
      ->type_name("VAR")
      ->check(base::nonEmpty("variable name"));
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  return serve(flags);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError(kProgram, e);
  }
}
