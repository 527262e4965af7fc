#pragma once
// waitUntil: the one way a test waits for a state that the code under test exposes (a server's
// blocked calls, a log line, a file, a child's exit) instead of sleeping and hoping that another
// thread or process got there by then. Its deadline is generous, so it holds on a busy machine;
// a state that never comes fails the test at the deadline instead of hanging it.

#include <chrono>
#include <functional>
#include <thread>

namespace cumulus::testing {

// Polls `done` every `period` until it holds or `timeout` passes; returns whether it held (the
// last look is after the deadline, so a state reached just then still counts).
inline bool waitUntil(const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10),
                      std::chrono::milliseconds period = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(period);
  }
  return done();
}

}  // namespace cumulus::testing
