#pragma once
// cumulus-run under Slurm: `srun cumulus-run -- PROGRAM …` inside an allocation needs no flags.
// From the job step's environment:
//   SLURM_NNODES (or SLURM_JOB_NUM_NODES)  → --nnodes (an experiment's elastic launch.nnodes
//                                            "MIN:MAX" keeps its MIN; the allocation is MAX)
//   SLURM_NODEID                           → --node-rank
//   SLURM_JOB_NODELIST (or SLURM_NODELIST) → --rdzv-endpoint FIRST_HOST:PORT, PORT from
//                                            CUMULUS_RDZV_PORT (default kSlurmRdzvPort)
//   SLURM_JOB_ID                           → --run-id slurm-ID
// Slurm's SIGTERM before the kill (scancel, time limit, preemption) already takes the launcher's
// preemption path: checkpoint at an agreed step, exit 75.

#include <functional>
#include <string>
#include <vector>

#include "launch/options.h"

namespace cumulus::launch {

constexpr int kSlurmRdzvPort = 29400;

// "node[01-03,07],gpu5,login[1-2]-ib" → {"node01","node02","node03","node07","gpu5","login1-ib",
// "login2-ib"}: Slurm's hostlist syntax with one bracket group per name, ranges keep their zero
// padding. Throws UsageError naming the list for an unbalanced bracket or a bad range.
std::vector<std::string> expandSlurmNodelist(const std::string& nodelist);

// Fills the options above from `getenv` when SLURM_JOB_ID is set, leaving any flag given on the
// command line alone, and marks what it set as given (so an experiment's launch: section does not
// override the allocation). Returns whether it applied. Throws UsageError naming the variable when
// one is malformed or inconsistent (SLURM_NODEID ≥ SLURM_NNODES). Pure: no I/O but `getenv`.
bool applySlurmEnvironment(LaunchOptions& options,
                           const std::function<const char*(const char*)>& getenv);

}  // namespace cumulus::launch
