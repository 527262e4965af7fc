// cumulus-train: trains one experiment in this process (one worker of the group).
//
//   cumulus-train CONFIG.yaml [--set key=value]... [--print-config] [--help]
//
// Exit codes: 0 done; 2 the user must fix something (usage, config, dataset, environment);
// 1 the run failed (diverged, LibTorch error, an output could not be written).

#include <unistd.h>

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "configs/cli.h"
#include "configs/parse.h"
#include "trainer/run_env.h"
#include "trainer/trainer.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr const char* kProgram = "cumulus-train";

cumulus::configs::CliSpec cliSpec() {
  return {
      kProgram, "Trains one worker of an experiment (WORLD_SIZE 1 for now).", "CONFIG", true, {}};
}

int fail(int code, const std::string& message) {
  std::cerr << "cumulus-train: error: " << message << "\n";
  return code;
}

int runMain(int argc, char** argv) {
  using namespace cumulus;
  const configs::CliArgs args = configs::parseCommandLine(cliSpec(), argc, argv);
  if (args.help) {
    std::cout << configs::usageText(cliSpec());
    return 0;
  }
  const configs::Experiment experiment = configs::loadExperiment(args.config_path, args.overrides);
  if (args.print_config) {
    std::cout << configs::toYaml(experiment);
    return 0;
  }
  const trainer::RunEnv env = trainer::RunEnv::fromEnvironment();
  if (env.world_size > 1) {
    return fail(kExitUsage, "WORLD_SIZE=" + std::to_string(env.world_size) +
                                ": this build trains with one worker only; multi-worker "
                                "training arrives with cumulus-run");
  }
  trainer::TrainerOptions options;
  options.console = &std::cout;
  options.live_progress = isatty(STDOUT_FILENO) == 1;
  trainer::Trainer trainer(experiment, env, options);
  trainer.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const cumulus::configs::CliError& e) {
    // Its message starts with "cumulus-train: "; ours adds "error: " after that.
    std::string message = e.what();
    const std::string prefix = std::string(kProgram) + ": ";
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
    return fail(kExitUsage, message);
  } catch (const cumulus::configs::ConfigError& e) {
    return fail(kExitUsage, e.what());
  } catch (const cumulus::trainer::EnvError& e) {
    return fail(kExitUsage, e.what());
  } catch (const cumulus::trainer::SetupError& e) {
    return fail(kExitUsage, e.what());
  } catch (const std::exception& e) {
    return fail(kExitFailure, e.what());
  }
}
