#pragma once
// Test helper: a folder of the running test's own, <TempDir>/<prefix>_<pid>_<test name>, so that
// tests running at once (ctest -j, two checkouts) never share one. No LibTorch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace cumulus::testing {

// Empties (or creates) the running test's folder and returns its path.
inline std::filesystem::path freshTestDir(const std::string& prefix) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      (prefix + "_" + std::to_string(::getpid()) + "_" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace cumulus::testing
