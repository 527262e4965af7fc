#pragma once
// Clock: where code that waits or measures time gets "now" from, passed in so that a test can
// replace it. SteadyClock reads std::chrono::steady_clock; FakeClock stands still until the test
// moves it. Both are thread-safe.

#include <chrono>
#include <mutex>

namespace cumulus::base {

class Clock {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;
  // Monotonic: never goes backwards. Does not block.
  virtual TimePoint now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
};

// A clock that tests drive: now() is the start time plus every advance() so far.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint{}) : now_(start) {}
  TimePoint now() const override;
  // Moves the clock forward by `step`. Throws std::invalid_argument for a negative step (a clock
  // that goes backwards is not monotonic).
  void advance(Duration step);

 private:
  mutable std::mutex mutex_;
  TimePoint now_;
};

}  // namespace cumulus::base
