// cumulus-train: trains one experiment in this process (one worker of the group).
//
//   cumulus-train CONFIG.yaml [--set key=value]... [--trace PATH] [--resume auto|none|PATH]
//                 [--allow-config-change | --overwrite] [--preemption-grace S] [--print-config]
//                 [--help]
//
// Alone (no WORLD_SIZE, or 1) it trains by itself. Started by cumulus-run (WORLD_SIZE > 1 and
// the rest of the torchrun environment) it joins the group: see distributed/group_connection.h.
//
// A SIGTERM is a preemption notice: the ranks agree on a stop step, checkpoint it and exit 75.
//
// Exit codes: 0 done; 2 the user must fix something, or a retry would fail the same way (usage,
// config, dataset, environment, a checkpoint that cannot be resumed, a job token the Store or a
// peer rejects, a run directory another job holds or another experiment's checkpoints, a full or
// read-only disk, a diverged loss, an error in the model's code); 1 the run failed otherwise (a
// peer died, checkpoints kept failing); 75 preempted after a checkpoint (resumable: run the same
// command again).

#include "trainer/train_command.h"

int main(int argc, char** argv) { return cumulus::trainer::trainCommand(argc, argv); }
