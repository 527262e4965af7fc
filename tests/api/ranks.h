#pragma once
// Ranks as threads (as Gloo's tests): `world` public ProcessGroups over one comm::MemoryStore in
// this process, each rank's body on its own thread.

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/testing.h"
#include "comm/memory_store.h"
#include "cumulus/process_group.h"

namespace cumulus::testing {

inline GroupOptions testGroupOptions(Algorithm algorithm = Algorithm::kRing) {
  GroupOptions options;
  options.algorithm = algorithm;
  options.timeout_seconds = 20;
  return options;
}

// Runs body(group) for ranks 0..world-1 on threads; an exception of a rank fails the test with
// its rank and text. The group is destroyed when its body returns.
inline void runRanks(int world, const std::function<void(ProcessGroup&)>& body,
                     const GroupOptions& options = testGroupOptions()) {
  comm::MemoryStore store;
  std::mutex mutex;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        base::RunEnv env;
        env.rank = rank;
        env.world_size = world;
        env.local_rank = rank;
        env.local_world_size = world;
        env.job_token = "api-test-token";
        std::unique_ptr<ProcessGroup> group = groupOverStore(env, store, options);
        body(*group);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back("rank " + std::to_string(rank) + ": " + e.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const std::string& error : errors) ADD_FAILURE() << error;
}

}  // namespace cumulus::testing
