#pragma once
// The first step of a "cumulus" group's rendezvous, before any connection: every rank publishes
// the world size it was started with and reads every other rank's, so that ranks started with
// different world sizes (WORLD_SIZE 2 on one, 3 on another) fail at once, naming both, rather than
// wait for a rank that does not exist and report a timeout.
//
// Keys (in the group's own c10d store): cumulus/world_size/g<generation>/<rank>, the decimal size.
// Rank r reads the keys of ranks 0 .. size - 1 in order, so two ranks that disagree both see the
// other's as soon as it is written. A rank whose own size is larger waits for ranks that may not
// exist, until the deadline.

#include <chrono>

#include "cumulus/process_group.h"
#include "cumulus/store.h"

namespace cumulus::python {

// Blocks until every other rank of member.size has published its size, or until `deadline`.
// Throws GroupError when one differs; the text names both sizes and both ranks (the lower rank
// first, so that both raise the same words). Throws CommError (kRendezvous, naming the first
// missing rank) when some never published by `deadline`: the text lists them and `timeout`, the
// timeout the caller gave. A c10d store failure is the store's CommError.
void checkWorldSize(Store& store, const GroupMember& member,
                    std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds timeout);

}  // namespace cumulus::python
