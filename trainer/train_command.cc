// cumulus-train's command: flags, set-up, the run and its exit code (trainer/train_command.h).

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "base/env_names.h"
#include "configs/cli.h"
#include "configs/parse.h"
#include "configs/schema.h"
#include "cumulus/allocator.h"
#include "cumulus/errors.h"
#include "cumulus/options.h"
#include "cumulus/preemption.h"
#include "cumulus/process_group.h"
#include "distributed/trace.h"
#include "metrics/progress.h"
#include "metrics/startup_profile.h"
#include "trainer/run_env.h"
#include "trainer/train_command.h"
#include "trainer/trainer.h"

namespace {

constexpr int kExitFailure = cumulus::kFailureExitCode;
constexpr int kExitUsage = cumulus::kUserErrorExitCode;
constexpr const char* kProgram = "cumulus-train";

// cumulus-train's flags, besides the experiment's (configs/cli.h).
struct TrainFlags {
  cumulus::configs::ExperimentArgs experiment;
  std::string trace;
  std::string resume;
  bool allow_config_change = false;
  bool overwrite = false;
  double preemption_grace = 0;  // 0: the trainer's default
};

void addFlags(CLI::App& app, TrainFlags& flags) {
  using namespace cumulus;
  base::setUpCommandLine(app,
                         "0 done, 1 failed, 2 a failure a retry repeats (usage, config, "
                         "disk), 75 preempted after a checkpoint (the message is on stderr)",
                         "Every key, its default and meaning: cumulus-config reference");
  configs::addExperimentArgs(app, flags.experiment);
  app.add_option("--trace", flags.trace,
                 "write a Chrome trace of the steps (Perfetto); a group rank inserts .rank<N> or "
                 "fills {rank}")
      ->type_name("PATH")
      ->check(base::nonEmpty("PATH"));
  app.add_option("--resume", flags.resume,
                 "continue from the newest valid checkpoint (auto), a checkpoint directory, or "
                 "not (none); default: auto under cumulus-run, else none")
      ->type_name("auto|none|PATH")
      ->check(base::nonEmpty("value: auto, none or a checkpoint directory"));
  app.add_flag("--allow-config-change", flags.allow_config_change,
               "resume even if the experiment differs from the checkpoint's (the keys are listed)");
  app.add_flag("--overwrite", flags.overwrite,
               "start over in a run directory that holds another experiment's checkpoints, "
               "removing them (without it, such a start is refused)");
  // Under cumulus-run the launcher passes a grace just inside its own; the flag wins.
  app.add_option("--preemption-grace", flags.preemption_grace,
                 "after a SIGTERM notice, exit 75 within S seconds even if the checkpoint hangs "
                 "(default " +
                     configs::formatNumber(kDefaultPreemptionGraceSeconds) + ")")
      ->type_name("S")
      ->envname(base::env::kPreemptionGrace)
      ->transform(base::positiveNumber("number of seconds", 86400));
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

// What cumulus-train's own flags say to the Trainer; a SIGTERM is a preemption notice.
cumulus::trainer::TrainerOptions optionsFrom(const TrainFlags& flags) {
  cumulus::trainer::TrainerOptions options;
  if (!flags.resume.empty()) options.resume = cumulus::trainer::ResumeMode::parse(flags.resume);
  options.allow_config_change = flags.allow_config_change;
  options.overwrite = flags.overwrite;
  if (flags.preemption_grace > 0) options.preemption_grace = flags.preemption_grace;
  options.watch_sigterm = true;
  return options;
}

int runMain(int argc, char** argv, const cumulus::trainer::TrainCustomization& customize) {
  using namespace cumulus;
  // Before anything allocates much: a step's large blocks then stay in the heap for the next.
  const AllocatorChoice allocator = useTrainingAllocator();
  metrics::StartupProfile startup;
  CLI::App app{"Trains one worker of an experiment (alone, or one rank of a cumulus-run group).",
               kProgram};
  TrainFlags flags;
  addFlags(app, flags);
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  const configs::Experiment experiment =
      configs::loadExperiment(flags.experiment.config_path, flags.experiment.overrides);
  if (flags.experiment.print_config) {
    std::cout << configs::toYaml(experiment);
    return 0;
  }
  const trainer::RunEnv env = trainer::RunEnv::fromEnvironment();
  // Said only when it is not the training setting (the documented default): someone chose so.
  if (!allocator.tuned &&
      !metrics::Progress::quietFor(env.rank, experiment.trainer.log_all_ranks)) {
    std::cout << allocator.text << std::endl;
  }
  startup.mark("config");
  trainer::TrainerOptions options = optionsFrom(flags);
  options.startup = &startup;
  // The deadline covers start-up too: a notice while this worker waits in the rendezvous or a
  // collective for a peer that the notice already killed must not keep it alive past the grace.
  // The process-wide watchdog replaces the trainer's own.
  cumulus::PreemptionOptions deadline;
  deadline.grace_seconds = options.preemption_grace;
  cumulus::PreemptionWatcher watchdog(cumulus::agreeAlone(), deadline);
  watchdog.startWatchdog();
  options.preemption_grace = 0;
  options.console = &std::cout;
  options.live_progress = isatty(STDOUT_FILENO) == 1;
  // Declared before the trainer, so they outlive it.
  std::unique_ptr<distributed::TraceRecorder> trace;
  std::unique_ptr<cumulus::ProcessGroup> group;
  std::shared_ptr<cumulus::Elastic> elastic;
  if (!flags.trace.empty()) {
    trace = std::make_unique<distributed::TraceRecorder>(static_cast<int>(env.rank));
    options.trace = trace.get();
  }
  cumulus::GroupOptions group_options;
  group_options.algorithm = experiment.comm.algorithm;
  group_options.timeout_seconds = experiment.comm.timeout_seconds;
  group_options.cost_model = experiment.comm.cost_model;
  elastic = trainer::connectInPlace(experiment, group_options, trace.get(), options);
  if (!elastic && env.world_size > 1) {
    group = cumulus::ProcessGroup::fromEnvironment(group_options);
    options.group = group.get();
    if (!metrics::Progress::quietFor(env.rank, experiment.trainer.log_all_ranks)) {
      std::cout << "rank " << env.rank << " of " << env.world_size << ": connected (generation "
                << env.generation << ", comm.algorithm "
                << cumulus::algorithmName(experiment.comm.algorithm) << ")" << std::endl;
    }
  }
  startup.mark("connect");
  if (customize) customize(options);
  trainer::Trainer trainer(experiment, env, options);
  const trainer::RunResult result = trainer.run();
  if (trace) {
    const std::string path = tracePath(flags.trace, env.rank, env.world_size);  // the launch's rank
    trace->write(path);
    std::cout << "trace: " << path << std::endl;
  }
  return result.preempted ? cumulus::kExitPreempted : 0;
}

}  // namespace

namespace cumulus::trainer {

int trainCommand(int argc, char** argv, const TrainCustomization& customize) {
  // First of all, so that a notice during start-up is not lost: it stops after the first step.
  cumulus::installSigtermHandler();
  cumulus::installCheckpointSignalHandler();
  try {
    return runMain(argc, argv, customize);
  } catch (const cumulus::CommError& e) {
    // A wrong job token fails the same way on every retry: a set-up error, not one to restart.
    if (e.kind() == cumulus::CommErrorKind::kUnauthorized) return fail(kExitUsage, e.what());
    return fail(kExitFailure, e.what());
  } catch (const std::exception& e) {
    // A bad config, flag, environment or group set-up is a cumulus::UserError: exit 2, not 1.
    return cumulus::base::reportError(kProgram, e);
  }
}

}  // namespace cumulus::trainer
