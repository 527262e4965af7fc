#include "base/clock.h"

#include <stdexcept>

namespace cumulus::base {

Clock::TimePoint FakeClock::now() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return now_;
}

void FakeClock::advance(Duration step) {
  if (step < Duration::zero()) {
    throw std::invalid_argument("FakeClock::advance: a negative step would move the clock back");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  now_ += step;
}

}  // namespace cumulus::base
