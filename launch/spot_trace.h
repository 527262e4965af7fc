#pragma once
// A seeded trace of spot preemptions for cumulus-spot (docs/spot.md).
//
// Launch i of a job (i = 0, 1, ...) runs with world size world_sizes[i % n] (empty: the job's
// own) and receives its preemption notice `notice_after_s` seconds after it starts, drawn from an
// exponential distribution with mean `mean_interval_s`: preemptions arrive as a Poisson process
// over the time the job holds machines (memoryless, so the clock restarting at each launch does
// not change the distribution). After the notice the launch has `notice_s` seconds to exit before
// it is killed; the next launch starts `relaunch_delay_s` after it is gone. Launches numbered
// max_preemptions and later are never preempted, so every trace ends.
//
// Deterministic: launch(i) depends only on (seed, i), through SplitMix64 and one log(), so the
// same seed gives the same trace on every platform. A value type; const methods are thread-safe.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cumulus::launch {

struct SpotTraceOptions {
  uint64_t seed = 0;
  double mean_interval_s = 60.0;     // mean time from a launch's start to its notice; <= 0: never
  double notice_s = 10.0;            // notice -> kill
  double relaunch_delay_s = 1.0;     // exit -> next launch
  std::vector<int64_t> world_sizes;  // per launch, cycled; empty: keep the command's
  int64_t max_preemptions = 100;
};

struct SpotLaunch {
  int64_t index = 0;
  int64_t world_size = 0;  // 0: the command's own
  // Seconds after the launch starts; +inf: no notice.
  double notice_after_s = std::numeric_limits<double>::infinity();
  bool preempted() const { return notice_after_s != std::numeric_limits<double>::infinity(); }
};

class SpotTrace {
 public:
  // Throws std::invalid_argument for a negative notice or delay, or a world size < 1.
  explicit SpotTrace(SpotTraceOptions options);
  SpotLaunch launch(int64_t index) const;
  const SpotTraceOptions& options() const { return options_; }
  // "launch 0: world 2, notice at 37.2 s" lines for the first `count` launches.
  std::string describe(int64_t count) const;

 private:
  SpotTraceOptions options_;
};

// "2,1,2" -> {2, 1, 2}. Throws std::invalid_argument naming `flag` for a bad item.
std::vector<int64_t> parseWorldSizes(const std::string& text, const std::string& flag);

// Uniform double in [0, 1) from (seed, index): SplitMix64 of seed ^ golden * (index + 1).
double uniformAt(uint64_t seed, uint64_t index);

}  // namespace cumulus::launch
