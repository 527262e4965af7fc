#include "trainer/rank_reduce.h"

#include <torch/types.h>

#include "cumulus/process_group.h"

namespace cumulus::trainer {
namespace {

bool alone(const cumulus::ProcessGroup* group) { return group == nullptr || group->size() == 1; }

CollectiveOptions byTree(ReduceOp op) {
  CollectiveOptions options;
  options.op = op;
  options.algorithm = Algorithm::kTree;
  return options;
}

}  // namespace

void sumOverRanks(cumulus::ProcessGroup* group, double* values, size_t count) {
  if (alone(group)) return;
  torch::Tensor view = torch::from_blob(values, {static_cast<int64_t>(count)}, torch::kFloat64);
  group->allreduce(view, byTree(ReduceOp::kSum));
}

double sumOverRanks(cumulus::ProcessGroup* group, double value) {
  sumOverRanks(group, &value, 1);
  return value;
}

int64_t maxOverRanks(cumulus::ProcessGroup* group, int64_t value) {
  if (alone(group)) return value;
  torch::Tensor view = torch::from_blob(&value, {1}, torch::kInt64);
  group->allreduce(view, byTree(ReduceOp::kMax));
  return value;
}

}  // namespace cumulus::trainer
