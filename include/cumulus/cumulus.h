#pragma once
// <cumulus/cumulus.h>: all of Cumulus's public C++ API. See docs/library.md for a tour.
//
//   cumulus/version.h        the version (CUMULUS_VERSION_STRING, cumulus::version())
//   cumulus/allocator.h      useTrainingAllocator: malloc set for a training step's large blocks
//   cumulus/errors.h         UserError, GroupError, PermanentError, CommError, CheckpointError;
//                            exit codes
//   cumulus/options.h        Algorithm, Compression, Precision: the typed choices, their names and
//                            parsers
//   cumulus/precision.h      choosePrecision (fp32, bf16, auto from the CPU), Autocast: bf16
//                            forward passes with float32 weights
//   cumulus/process_group.h  ProcessGroup from the torchrun environment; collectives on tensors
//   cumulus/data_parallel.h  DataParallel: bucketed gradient all-reduce overlapped with backward
//   cumulus/sampler.h        DistributedSampler: global batches, sharded, resumable by cursor
//   cumulus/checkpoint.h     Checkpoints: atomic, verified, newest valid found by scan;
//                            packCheckpoint: one as bytes, for a transfer without a disk
//   cumulus/checkpoint_state.h  a checkpoint's state.pb as plain fields (no LibTorch)
//   cumulus/preemption.h     PreemptionWatcher: "stop after this step?", agreed by all ranks
//   cumulus/run_directory.h  RunDirectoryLock: one job per run directory; whose checkpoints
//   cumulus/step_watchdog.h  StepWatchdog: a step that makes no progress ends the process
//
// Link with Cumulus::cumulus (CMake: find_package(Cumulus REQUIRED)) or `pkg-config cumulus`.

#include "cumulus/allocator.h"
#include "cumulus/batch_shares.h"
#include "cumulus/checkpoint.h"
#include "cumulus/checkpoint_state.h"
#include "cumulus/data_parallel.h"
#include "cumulus/elastic.h"
#include "cumulus/errors.h"
#include "cumulus/options.h"
#include "cumulus/precision.h"
#include "cumulus/preemption.h"
#include "cumulus/process_group.h"
#include "cumulus/recorder.h"
#include "cumulus/run_directory.h"
#include "cumulus/sampler.h"
#include "cumulus/step_watchdog.h"
#include "cumulus/store.h"
#include "cumulus/version.h"
