#pragma once
// The small all-reduces the step loop's parts share: a record's loss, an evaluation's sums, the
// stop agreement's integer. Each uses the tree algorithm, fixed, so a sum is bit-identical from
// run to run and one integer never goes through the funnel's parameter server. No LibTorch here.
//
// Every rank calls them in the same order (they are collectives); `comm` == nullptr is a world of
// one, where each is the identity and never blocks. Otherwise they block until every rank has
// contributed and throw the communicator's CommError on a failure or timeout.

#include <cstddef>
#include <cstdint>

#include "trainer/preemption.h"

namespace cumulus::comm {
class Communicator;
}

namespace cumulus::trainer {

double sumOverRanks(comm::Communicator* comm, double value);
// In place, element by element.
void sumOverRanks(comm::Communicator* comm, double* values, size_t count);
int64_t maxOverRanks(comm::Communicator* comm, int64_t value);
// maxOverRanks as the PreemptionWatcher's agreement; `comm` must outlive the result.
AgreeMax agreeOver(comm::Communicator* comm);

}  // namespace cumulus::trainer
