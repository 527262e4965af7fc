#pragma once
// Reads the `launch:` and `comm:` sections of the experiment a worker command names, so that
// `cumulus-run -- cumulus-train configs/x.yaml --set launch.nproc_per_node=4` needs no flags.
// Command-line flags win over the YAML (LaunchOptions::explicit_flags says which were given).

#include <string>

#include "launch/options.h"

namespace cumulus::launch {

// The first argument of options.command (after the program) that ends in .yaml or .yml, and is
// not the value of a --set; "" if none.
std::string experimentPathOf(const std::vector<std::string>& command);

// If the command names an experiment, loads it with the command's own `--set` overrides and fills
// every option not given as a flag from its launch section (under Slurm an elastic
// launch.nnodes "MIN:MAX" keeps its MIN, capped by the allocation); sets host_parameter_server when
// comm.algorithm is funnel. Throws UsageError carrying the config error (file, key, line:column),
// or naming --node-rank when it is out of range for the node count, whatever set that count.
void applyExperimentLaunchSection(LaunchOptions& options);

}  // namespace cumulus::launch
