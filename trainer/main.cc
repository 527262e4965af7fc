// cumulus-train: trains one experiment in this process (one worker of the group).
//
//   cumulus-train CONFIG.yaml [--set key=value]... [--trace PATH] [--resume auto|none|PATH]
//                 [--allow-config-change] [--preemption-grace S] [--print-config] [--help]
//
// Alone (no WORLD_SIZE, or 1) it trains by itself. Started by cumulus-run (WORLD_SIZE > 1 and
// the rest of the torchrun environment) it joins the group: see trainer/process_group.h.
//
// A SIGTERM is a preemption notice: the ranks agree on a stop step, checkpoint it and exit 75.
//
// Exit codes: 0 done; 2 the user must fix something (usage, config, dataset, environment, a
// checkpoint that cannot be resumed, a job token the Store or a peer rejects); 1 the run failed (diverged, LibTorch error, an output could
// not be written); 75 preempted after a checkpoint (resumable: run the same command again).

#include "trainer/train_command.h"

int main(int argc, char** argv) { return cumulus::trainer::trainCommand(argc, argv); }
