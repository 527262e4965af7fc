#pragma once
// The torchrun-style environment a worker is started with: base::RunEnv (base/run_env.h) is the
// one reader; the trainer's names for it stay for its callers. No LibTorch here.

#include <cstdint>

#include "base/run_env.h"

namespace cumulus::trainer {

using EnvError = base::EnvError;
using RunEnv = base::RunEnv;

// Intra-op threads for this worker: `configured` if > 0, else the CPUs this process may run on
// divided by the workers on this node, at least 1.
int64_t intraOpThreads(int64_t configured, int64_t local_world_size);

}  // namespace cumulus::trainer
