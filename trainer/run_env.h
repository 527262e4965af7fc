#pragma once
// The torchrun-style environment a worker is started with: base::RunEnv (base/run_env.h) is the
// one reader; the trainer's names for it stay for its callers. No LibTorch here.

#include <cstdint>

#include "base/run_env.h"

namespace cumulus::trainer {

using EnvError = base::EnvError;
using RunEnv = base::RunEnv;

// Intra-op threads for this worker: `configured` if > 0, else the CPUs this process may run on
// (sched_getaffinity) divided by the workers on this node, at least 1. A `configured` count above
// those CPUs throws cumulus::UserError naming trainer.threads: LibTorch would try to start that many
// threads (a million of them never finish starting).
int64_t intraOpThreads(int64_t configured, int64_t local_world_size);
// The same with `cores` CPUs (tests).
int64_t intraOpThreads(int64_t configured, int64_t local_world_size, int64_t cores);

}  // namespace cumulus::trainer
