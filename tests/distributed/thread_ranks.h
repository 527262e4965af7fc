#pragma once
// Ranks of one test group as threads of this process (each with its own ProcessGroup over a shared
// MemoryStore, built by the body): the loop, the joins and the first error, in one place.

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cumulus::distributed {

// Runs body(rank) for ranks 0..world-1, each on a thread of its own, waits for all of them and
// rethrows the first exception any of them threw.
inline void runOnThreads(int world, const std::function<void(int)>& body) {
  std::mutex mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace cumulus::distributed
