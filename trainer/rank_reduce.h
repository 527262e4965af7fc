#pragma once
// The small all-reduces the step loop's parts share: a record's loss, an evaluation's sums, the
// resume check's step. Each uses the tree algorithm, fixed, so a sum is bit-identical from run to
// run and one number never goes through the funnel's parameter server. Built on the public
// ProcessGroup (<cumulus/process_group.h>).
//
// Every rank calls them in the same order (they are collectives); `group` == nullptr, or a group
// of one, is a world of one, where each is the identity and never blocks. Otherwise they block
// until every rank has contributed and throw the group's CommError on a failure or timeout.

#include <cstddef>
#include <cstdint>

namespace cumulus {
class ProcessGroup;
}

namespace cumulus::trainer {

double sumOverRanks(cumulus::ProcessGroup* group, double value);
// In place, element by element.
void sumOverRanks(cumulus::ProcessGroup* group, double* values, size_t count);
int64_t maxOverRanks(cumulus::ProcessGroup* group, int64_t value);

}  // namespace cumulus::trainer
