#pragma once
// Ranks of one test group as threads of this process (each with its own group over a shared
// MemoryStore, built by the body): the comm tests' runner (tests/comm/group.h), under the name
// these tests use.

#include <functional>

#include "tests/comm/group.h"

namespace cumulus::distributed {

// Runs body(rank) for ranks 0..world-1, each on a thread of its own, waits for all of them and
// rethrows the first exception any of them threw.
inline void runOnThreads(int world, const std::function<void(int)>& body) {
  comm::testing::spawn(world, body);
}

}  // namespace cumulus::distributed
