// useTrainingAllocator (<cumulus/allocator.h>): glibc's malloc thresholds, fixed for training.

#include "cumulus/allocator.h"

#include <malloc.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/env_names.h"
#include "cumulus/errors.h"

namespace cumulus {

AllocatorChoice useTrainingAllocator() {
  const char* choice = std::getenv(base::env::kMalloc);
  const std::string mode = choice == nullptr ? "" : choice;
  if (mode == "default") {
    return {false, "malloc: glibc's own thresholds (CUMULUS_MALLOC=default)"};
  }
  if (!mode.empty() && mode != "training") {
    throw UserError(std::string(base::env::kMalloc) + "=" + mode +
                    ": expected training (the default) or default");
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    return {false, "malloc: as GLIBC_TUNABLES sets it"};
  }
#ifdef __GLIBC__
  constexpr int kMmapThreshold = 64 << 20;  // 64 MiB
  constexpr int kTrimThreshold = INT_MAX;  // 2 GiB, mallopt's largest
  if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
      mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1) {
    return {true,
            "malloc: freed blocks stay in the heap for reuse (mmap threshold 64 MiB, trim "
            "threshold 2 GiB; CUMULUS_MALLOC=default for glibc's own)"};
  }
  return {false, "malloc: glibc refused the training thresholds; its own apply"};
#else
  return {false, "malloc: the C library's own (not glibc)"};
#endif
}

}  // namespace cumulus
