// cumulus-sha256-bench: how fast checkpoints are hashed (MANIFEST writes and verifies hash every
// file once). Hashes a buffer of --mib MiB --rounds times with base::Sha256, in 1 MiB updates
// as the checkpoint writer does, and prints the best round's MB/s (10^6 bytes per second).
//
//   cumulus-sha256-bench [MIB [ROUNDS]]      defaults: 256 MiB, 5 rounds
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "base/hash.h"

namespace {

int run(int argc, char** argv) {
  namespace base = cumulus::base;
  CLI::App app{
      "How fast checkpoints are hashed: SHA-256 of a buffer in 1 MiB updates, best of "
      "ROUNDS, in MB/s.",
      "cumulus-sha256-bench"};
  base::setUpCommandLine(app);
  long mib = 256;
  long rounds = 5;
  app.add_option("MIB", mib, "buffer size in MiB (default 256)")
      ->type_name("")
      ->transform(base::integerIn(1, 1 << 16));
  app.add_option("ROUNDS", rounds, "rounds, the best counts (default 5)")
      ->type_name("")
      ->transform(base::integerIn(1, 1000000));
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  std::vector<unsigned char> data(static_cast<size_t>(mib) << 20);
  uint32_t x = 12345;
  for (auto& b : data) {
    x = x * 1103515245u + 12345u;
    b = static_cast<unsigned char>(x >> 24);
  }
  double best = 0;
  std::string hex;
  for (long r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    cumulus::base::Sha256 hasher;
    for (size_t off = 0; off < data.size(); off += 1 << 20) hasher.update(&data[off], 1 << 20);
    hex = cumulus::base::toHex(hasher.digest());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(data.size()) / s / 1e6);
  }
  std::printf("sha256 %ld MiB x %ld rounds: best %.0f MB/s (digest %s)\n", mib, rounds, best,
              hex.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError("cumulus-sha256-bench", e);
  }
}
