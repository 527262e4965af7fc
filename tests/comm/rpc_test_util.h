#pragma once
// Helpers shared by the gRPC tests of comm/: ranks as threads, known-answer inputs, and a
// float16 encoder for the small integers those inputs use.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/error.h"
#include "tests/wait_until.h"

namespace cumulus::comm::rpctest {

// Runs fn(rank) on `world` threads (unlike testing::spawn in group.h, it collects the errors) and
// returns what each threw (nullptr = returned normally).
inline std::vector<std::exception_ptr> runRanks(int world, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

using cumulus::testing::waitUntil;  // tests/wait_until.h

// Rethrows the first error, so a failing rank's message reaches the test output.
inline void expectNoErrors(const std::vector<std::exception_ptr>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (!errors[rank]) continue;
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
    }
  }
}

// The CommError a rank threw; fails the test if it returned or threw something else.
inline CommError commErrorOf(const std::exception_ptr& error) {
  if (!error) {
    ADD_FAILURE() << "expected a CommError, the call returned normally";
    return CommError(ErrorKind::kInvalid, "none", 0, -1, "no error");
  }
  try {
    std::rethrow_exception(error);
  } catch (const CommError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a CommError, got: " << e.what();
  }
  return CommError(ErrorKind::kInvalid, "none", 0, -1, "wrong exception");
}

// Input of `rank` at index i: a small integer in [-3, 6], exact in every dtype, so that sums
// over ≤ 8 ranks are exact too.
inline int inputValue(int rank, size_t i) { return rank % 4 + static_cast<int>(i % 7) - 3; }

// float16 bits of a float that float16 represents exactly (normal numbers and zero).
inline uint16_t exactHalf(float f) {
  if (f == 0.0f) return std::signbit(f) ? 0x8000 : 0;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  const uint32_t mantissa = (bits >> 13) & 0x3ffu;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) | mantissa);
}

inline double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace cumulus::comm::rpctest

namespace cumulus::comm::rpctest {

// The float value of float16 bits (normal numbers and zero: what exactHalf produces).
inline float halfValue(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t bits = sign;
  if (exponent != 0) bits |= ((exponent - 15 + 127) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace cumulus::comm::rpctest
