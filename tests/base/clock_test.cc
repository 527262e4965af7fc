#include "base/clock.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cumulus::base {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ClockTest, FakeClockMovesOnlyWhenTold) {
  FakeClock clock(Clock::TimePoint(seconds(100)));
  EXPECT_EQ(clock.now(), Clock::TimePoint(seconds(100)));
  EXPECT_EQ(clock.now(), Clock::TimePoint(seconds(100)));
  clock.advance(milliseconds(1500));
  EXPECT_EQ(clock.now(), Clock::TimePoint(milliseconds(101500)));
  clock.advance(Clock::Duration::zero());
  EXPECT_EQ(clock.now(), Clock::TimePoint(milliseconds(101500)));
}

TEST(ClockTest, FakeClockRefusesToGoBack) {
  FakeClock clock;
  try {
    clock.advance(-milliseconds(1));
    FAIL() << "a negative step was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "FakeClock::advance: a negative step would move the clock back");
  }
  EXPECT_EQ(clock.now(), Clock::TimePoint{});
}

TEST(ClockTest, SteadyClockIsMonotonicAndReal) {
  SteadyClock clock;
  const Clock& asClock = clock;
  const auto a = asClock.now();
  const auto real = std::chrono::steady_clock::now();
  const auto b = asClock.now();
  EXPECT_LE(a, real);
  EXPECT_LE(real, b);
}

}  // namespace
}  // namespace cumulus::base
