#pragma once
// What many test files need, written once: the project's programs as built, a scratch folder
// that goes away with the test, a whole file's bytes, and the message an expected exception
// carries. No LibTorch. Test files are compiled several to a unit (a unity build), so a helper
// that two files would each define belongs here, or under a name of its file's own.

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace cumulus::testing {

// The programs the build makes (CUMULUS_BINARY_DIR is set for every test binary) and the example
// experiment most process tests train.
inline const std::string kRun = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-run";
inline const std::string kTrain = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-train";
inline const std::string kProbe = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-allreduce-probe";
inline const std::string kSmoke = std::string(CUMULUS_SOURCE_DIR) + "/configs/smoke.yaml";

// A new, empty folder under /tmp (cumulus_<prefix>_XXXXXX), removed with all it holds when the
// object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "test") {
    std::string pattern = "/tmp/cumulus_" + prefix + "_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The file's bytes; empty when it cannot be read (the test's assertion then says what it missed).
inline std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The what() of the exception `fn` throws, or "(no error)" when it returns.
inline std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace cumulus::testing
