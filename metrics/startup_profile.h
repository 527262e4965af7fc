#pragma once
// Where a worker's start-up time goes, from exec() to the end of its first training step: the
// number that decides how much a restart after a preemption costs (target: <= 5 s, docs/spot.md).
//
//   StartupProfile profile;          // at the top of main()
//   profile.mark("connect");         // after each phase: the time since the previous mark
//   profile.summary()  ->  "2.31 s after exec: process 0.37, connect 0.02, data 1.20, ..."
//
// The first phase, "process", runs from the kernel's start time of this process (exec, dynamic
// loading of LibTorch, static initializers) to the constructor; its resolution is one clock tick
// (10 ms on Linux). Not thread-safe: one thread marks.

#include <string>
#include <utility>
#include <vector>

namespace cumulus::metrics {

class StartupProfile {
 public:
  StartupProfile();

  void mark(const std::string& phase);  // closes `phase`: the time since the previous mark
  double totalSeconds() const;          // from exec to the last mark
  // "<total> s after exec: process 0.37, connect 0.02, data 1.20" (seconds, 2 decimals).
  std::string summary() const;
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }

 private:
  double last_ = 0;  // CLOCK_BOOTTIME seconds of the previous mark
  std::vector<std::pair<std::string, double>> phases_;
};

// Seconds from this process's start (as the kernel recorded it) to now; 0 where /proc is missing.
double secondsSinceProcessStart();

}  // namespace cumulus::metrics
