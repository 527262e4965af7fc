// cumulus-train: trains one experiment in this process (one worker of the group).
//
//   cumulus-train CONFIG.yaml [--set key=value]... [--print-config]
//
// Exit codes: 0 done; 2 the user must fix something (usage, config, dataset, environment);
// 1 the run failed (diverged, LibTorch error, an output could not be written).

#include <unistd.h>

#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "configs/parse.h"
#include "trainer/run_env.h"
#include "trainer/trainer.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

constexpr const char* kUsage =
    "usage: cumulus-train CONFIG.yaml [--set key=value]... [--print-config]\n"
    "  --set key=value   override a config key, e.g. --set optimizer.lr=0.05 (repeatable)\n"
    "  --print-config    print the resolved experiment as YAML and exit\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  bool print_config = false;
  bool help = false;
};

Args parseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.help = true;
    } else if (arg == "--print-config") {
      args.print_config = true;
    } else if (arg == "--set") {
      if (i + 1 >= argc) throw UsageError("--set needs a key=value argument");
      args.overrides.push_back(argv[++i]);
    } else if (arg.rfind("--set=", 0) == 0) {
      args.overrides.push_back(arg.substr(6));
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option " + arg);
    } else if (args.config.empty()) {
      args.config = arg;
    } else {
      throw UsageError("more than one config file: " + args.config + " and " + arg);
    }
  }
  if (args.config.empty() && !args.help) throw UsageError("missing CONFIG.yaml");
  return args;
}

int fail(int code, const std::string& message) {
  std::cerr << "cumulus-train: error: " << message << "\n";
  return code;
}

int runMain(int argc, char** argv) {
  using namespace cumulus;
  const Args args = parseArgs(argc, argv);
  if (args.help) {
    std::cout << kUsage;
    return 0;
  }
  const configs::Experiment experiment = configs::loadExperiment(args.config, args.overrides);
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
  } catch (const UsageError& e) {
    std::cerr << kUsage;
    return fail(kExitUsage, e.what());
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
