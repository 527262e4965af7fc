#pragma once
// The experiment part of a command line, shared by cumulus-train and cumulus-config:
//
//   PROGRAM CONFIG [--set KEY=VALUE]... [--print-config]
//
// added to a CLI11 App set up by base::setUpCommandLine (base/command_line.h), beside the
// program's own flags. `--set` may repeat; each KEY=VALUE is kept, in order, for
// loadExperiment(path, overrides).
//
// Typical main():
//   CLI::App app{"Trains one worker of an experiment.", "cumulus-train"};
//   base::setUpCommandLine(app);
//   ExperimentArgs args;
//   addExperimentArgs(app, args);
//   app.add_option("--resume", resume, "...")->type_name("DIR");
//   if (!base::parseCommandLine(app, argc, argv)) return 0;  // --help; else throws UsageError
//   Experiment experiment = loadExperiment(args.config_path, args.overrides);  // ConfigError
//   if (args.print_config) { std::cout << toYaml(experiment); return 0; }
//
// Thread-compatible.

#include <string>
#include <vector>

#include "base/command_line.h"

namespace cumulus::configs {

struct ExperimentArgs {
  std::string config_path;             // the positional
  std::vector<std::string> overrides;  // "KEY=VALUE" of each --set, in order
  bool print_config = false;
};

// Adds the required positional `positional` (the experiment file), --set KEY=VALUE (repeatable;
// a value without '=' or without a key is a UsageError) and, when `with_print_config`,
// --print-config, bound to `args`, which must outlive the parse.
void addExperimentArgs(CLI::App& app, ExperimentArgs& args,
                       const std::string& positional = "CONFIG", bool with_print_config = true);

}  // namespace cumulus::configs
