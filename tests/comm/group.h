#pragma once
// Test harness (as gloo/test/base_test.h): every rank is a thread of this process, each with its
// own Communicator over real loopback sockets, meeting in one MemoryStore.

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/memory_store.h"

namespace cumulus::comm::testing {

// Runs fn(rank) on `world` threads and joins them; rethrows the first exception.
inline void spawn(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// Host ids that lay out `hosts` × `local` ranks with `local` consecutive ranks on each host
// ("host-0", "host-0", "host-1", …). The ranks are all threads of this process, so equal ids
// really share a kernel (shared memory works between them); distinct ids make them meet over TCP,
// as ranks on different machines do.
inline std::vector<std::string> fakeHosts(int hosts, int local) {
  std::vector<std::string> ids;
  for (int r = 0; r < hosts * local; ++r) ids.push_back("host-" + std::to_string(r / local));
  return ids;
}

// A connected group of `world` communicators, kept for many collectives.
class Group {
 public:
  explicit Group(int world, CommunicatorOptions options = {}) : Group(world, options, {}) {}
  // Rank r says it is on host `hostIds[r]` (CommunicatorOptions::host_id); empty: the real host.
  Group(int world, CommunicatorOptions options, const std::vector<std::string>& hostIds)
      : comms_(world) {
    if (options.job_token.empty()) options.job_token = "test-token";
    spawn(world, [&](int r) {
      CommunicatorOptions mine = options;
      if (!hostIds.empty()) mine.host_id = hostIds[r];
      comms_[r] = std::make_unique<Communicator>(r, world, store_, mine);
    });
  }
  int world() const { return static_cast<int>(comms_.size()); }
  Communicator& at(int rank) { return *comms_[rank]; }
  // Runs fn(rank, communicator) on every rank concurrently.
  void run(const std::function<void(int, Communicator&)>& fn) {
    spawn(world(), [&](int r) { fn(r, *comms_[r]); });
  }

 private:
  MemoryStore store_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace cumulus::comm::testing
