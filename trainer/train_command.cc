// cumulus-train's command: flags, set-up, the run and its exit code (trainer/train_command.h).

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "comm/error.h"
#include "configs/cli.h"
#include "configs/parse.h"
#include "trainer/preemption.h"
#include "trainer/process_group.h"
#include "trainer/progress.h"
#include "trainer/run_env.h"
#include "trainer/startup_profile.h"
#include "trainer/trace.h"
#include "trainer/train_command.h"
#include "trainer/trainer.h"

namespace {

constexpr int kExitFailure = cumulus::base::kFailureExitCode;
constexpr int kExitUsage = cumulus::base::kUserErrorExitCode;
constexpr const char* kProgram = "cumulus-train";

cumulus::configs::CliSpec cliSpec() {
  return {kProgram,
          "Trains one worker of an experiment (alone, or one rank of a cumulus-run group).",
          "CONFIG",
          true,
          {{"trace", "PATH",
            "write a Chrome trace of the steps (Perfetto); a group rank inserts .rank<N> or fills "
            "{rank}"},
           {"resume", "auto|none|PATH",
            "continue from the newest valid checkpoint (auto), a checkpoint directory, or not "
            "(none); default: auto under cumulus-run, else none"},
           {"allow-config-change", "",
            "resume even if the experiment differs from the checkpoint's (the keys are listed)"},
           {"preemption-grace", "S",
            "after a SIGTERM notice, exit 75 within S seconds even if the checkpoint hangs "
            "(default 25)"}}};
}

// "{rank}" is replaced by the rank; otherwise, in a group, ".rank<N>" goes before the extension.
std::string tracePath(std::string path, int64_t rank, int64_t world) {
  const std::string r = std::to_string(rank);
  if (const size_t at = path.find("{rank}"); at != std::string::npos) {
    return path.replace(at, 6, r);
  }
  if (world <= 1) return path;
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return path + ".rank" + r;
  }
  return path.substr(0, dot) + ".rank" + r + path.substr(dot);
}

int fail(int code, const std::string& message) {
  std::cerr << "cumulus-train: error: " << message << "\n";
  return code;
}

int runMain(int argc, char** argv, const cumulus::trainer::TrainCustomization& customize) {
  using namespace cumulus;
  trainer::StartupProfile startup;
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
  startup.mark("config");
  trainer::TrainerOptions options;
  options.startup = &startup;
  options.resume = args.value("resume");
  if (args.has("resume") && options.resume.empty()) {
    return fail(kExitUsage, "--resume: give auto, none or a checkpoint directory");
  }
  options.allow_config_change = args.has("allow-config-change");
  // The flag wins; under cumulus-run the launcher passes a grace just inside its own.
  const char* launcher_grace = std::getenv("CUMULUS_PREEMPTION_GRACE");
  if (args.has("preemption-grace") || (launcher_grace && *launcher_grace)) {
    const std::string text =
        args.has("preemption-grace") ? args.value("preemption-grace") : launcher_grace;
    char* end = nullptr;
    options.preemption_grace = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != 0 || !(options.preemption_grace > 0)) {
      return fail(kExitUsage,
                  "--preemption-grace: '" + text + "' is not a positive number of seconds");
    }
  }
  options.watch_sigterm = true;
  // The deadline covers start-up too: a notice while this worker waits in the rendezvous or a
  // collective for a peer that the notice already killed must not keep it alive past the grace.
  // The process-wide watchdog replaces the trainer's own.
  trainer::PreemptionOptions deadline;
  deadline.grace_seconds = options.preemption_grace;
  trainer::PreemptionWatcher watchdog(trainer::agreeAlone(), deadline);
  watchdog.startWatchdog();
  options.preemption_grace = 0;
  options.console = &std::cout;
  options.live_progress = isatty(STDOUT_FILENO) == 1;
  // Declared before the trainer, so they outlive it.
  std::unique_ptr<trainer::TraceRecorder> trace;
  std::unique_ptr<trainer::ProcessGroup> group;
  if (args.has("trace")) {
    trace = std::make_unique<trainer::TraceRecorder>(static_cast<int>(env.rank));
    options.trace = trace.get();
  }
  if (env.world_size > 1) {
    group = std::make_unique<trainer::ProcessGroup>(trainer::groupEnvironment(), experiment.comm);
    options.group = group.get();
    if (!trainer::Progress::quietFor(env.rank, experiment.trainer.log_all_ranks)) {
      std::cout << "rank " << env.rank << " of " << env.world_size << ": connected (generation "
                << env.generation << ", comm.algorithm " << experiment.comm.algorithm << ")"
                << std::endl;
    }
  }
  startup.mark("connect");
  if (customize) customize(options);
  trainer::Trainer trainer(experiment, env, options);
  const trainer::RunResult result = trainer.run();
  if (trace) {
    const std::string path = tracePath(args.value("trace"), env.rank, env.world_size);
    trace->write(path);
    std::cout << "trace: " << path << std::endl;
  }
  return result.preempted ? trainer::kExitPreempted : 0;
}

}  // namespace

namespace cumulus::trainer {

int trainCommand(int argc, char** argv, const TrainCustomization& customize) {
  // First of all, so that a notice during start-up is not lost: it stops after the first step.
  cumulus::trainer::installSigtermHandler();
  cumulus::trainer::installCheckpointSignalHandler();
  try {
    return runMain(argc, argv, customize);
  } catch (const cumulus::configs::CliError& e) {
    // Its message starts with "cumulus-train: "; ours adds "error: " after that.
    std::string message = e.what();
    const std::string prefix = std::string(kProgram) + ": ";
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
    return fail(kExitUsage, message);
  } catch (const cumulus::comm::CommError& e) {
    // A wrong job token fails the same way on every retry: a set-up error, not one to restart.
    if (e.kind() == cumulus::comm::ErrorKind::kUnauthorized) return fail(kExitUsage, e.what());
    return fail(kExitFailure, e.what());
  } catch (const std::exception& e) {
    // A bad config, flag, environment or group set-up is a base::UserError: exit 2, not 1.
    return fail(cumulus::base::exitCodeFor(e), e.what());
  }
}

}  // namespace cumulus::trainer
