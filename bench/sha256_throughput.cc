// cumulus-sha256-bench: how fast checkpoints are hashed (MANIFEST writes and verifies hash every
// file once). Hashes a buffer of --mib MiB --rounds times with base::Sha256, in 1 MiB updates
// as the checkpoint writer does, and prints the best round's MB/s (10^6 bytes per second).
//
//   cumulus-sha256-bench [MIB [ROUNDS]]      defaults: 256 MiB, 5 rounds
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/hash.h"

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 256;
  const long rounds = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 5;
  if (mib < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: cumulus-sha256-bench [MIB >= 1 [ROUNDS >= 1]]\n");
    return 2;
  }
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
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(data.size()) / s / 1e6);
  }
  std::printf("sha256 %ld MiB x %ld rounds: best %.0f MB/s (digest %s)\n", mib, rounds, best,
              hex.c_str());
  return 0;
}
