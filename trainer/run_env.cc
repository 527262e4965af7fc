#include "trainer/run_env.h"

#include <algorithm>
#include <string>

#include "cumulus/errors.h"
#include "comm/cost_model.h"

namespace cumulus::trainer {

int64_t intraOpThreads(int64_t configured, int64_t local_world_size) {
  return intraOpThreads(configured, local_world_size, comm::usableCores());
}

int64_t intraOpThreads(int64_t configured, int64_t local_world_size, int64_t cores) {
  cores = std::max<int64_t>(1, cores);
  if (configured > cores) {
    throw cumulus::UserError("trainer.threads: " + std::to_string(configured) + " is more than the " +
                          std::to_string(cores) +
                          " cores this process may use (its CPU affinity); set at most " +
                          std::to_string(cores) + ", or 0 for cores / local workers");
  }
  if (configured > 0) return configured;
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, local_world_size));
}

}  // namespace cumulus::trainer
