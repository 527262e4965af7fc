// agreeOver (<cumulus/preemption.h>): the preemption agreement's MAX over a public ProcessGroup.

#include "cumulus/preemption.h"

#include <torch/types.h>

#include "cumulus/process_group.h"

namespace cumulus {

AgreeMax agreeOver(ProcessGroup& group) {
  if (group.size() == 1) return agreeAlone();
  return [&group](int64_t value) {
    torch::Tensor t = torch::full({1}, value, torch::kInt64);
    CollectiveOptions options;
    options.op = ReduceOp::kMax;
    options.algorithm = Algorithm::kTree;  // fixed: one integer never goes through the parameter server
    group.allreduce(t, options);
    return t.item<int64_t>();
  };
}

}  // namespace cumulus
