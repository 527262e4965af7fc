#include "trainer/run_env.h"

#include <algorithm>

#include "comm/cost_model.h"

namespace cumulus::trainer {

int64_t intraOpThreads(int64_t configured, int64_t local_world_size) {
  if (configured > 0) return configured;
  const int64_t cpus = comm::usableCores();
  return std::max<int64_t>(1, cpus / std::max<int64_t>(1, local_world_size));
}

}  // namespace cumulus::trainer
