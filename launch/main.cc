// cumulus-run: the torchrun-style launcher. See launch/options.h for the flags and
// launch/launcher.h for what it does and its exit codes.

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "launch/experiment_launch.h"
#include "launch/launcher.h"
#include "launch/options.h"
#include "launch/slurm_env.h"

namespace {
void onSignal(int sig) { cumulus::launch::Launcher::requestStop(sig); }
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  cumulus::launch::LaunchOptions options;
  try {
    options = cumulus::launch::parseLaunchArgs(args);
    if (options.help) return 0;
    cumulus::launch::applySlurmEnvironment(options, [](const char* n) { return std::getenv(n); });
    cumulus::launch::applyExperimentLaunchSection(options);
  } catch (const std::exception& e) {
    return cumulus::base::reportError("cumulus-run", e);
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  cumulus::launch::Launcher launcher(std::move(options), stdout);
  return launcher.run().exit_code;
}
