#include "trainer/rank_reduce.h"

#include "comm/communicator.h"

namespace cumulus::trainer {

void sumOverRanks(comm::Communicator* comm, double* values, size_t count) {
  if (comm == nullptr) return;
  comm::Buffer buffer{values, count, comm::DType::kFloat64};
  comm::AllreduceOptions op;
  op.algorithm = comm::Algorithm::kTree;
  comm->allreduce(buffer, op);
}

double sumOverRanks(comm::Communicator* comm, double value) {
  sumOverRanks(comm, &value, 1);
  return value;
}

int64_t maxOverRanks(comm::Communicator* comm, int64_t value) {
  if (comm == nullptr) return value;
  comm::Buffer buffer{&value, 1, comm::DType::kInt64};
  comm::AllreduceOptions op;
  op.op = comm::ReduceOp::kMax;
  op.algorithm = comm::Algorithm::kTree;
  comm->allreduce(buffer, op);
  return value;
}

AgreeMax agreeOver(comm::Communicator* comm) {
  return [comm](int64_t value) { return maxOverRanks(comm, value); };
}

}  // namespace cumulus::trainer
