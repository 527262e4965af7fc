// cumulus-token-scan-bench: what opening a token stream costs. TokenExamples::open maps the file
// and scans every token once for the smallest and largest id; this times ROUNDS opens of PATH
// (the first one pays for reading the file into the page cache if it is not there yet; the
// others for mapping it again and the scan) and prints the first and the best, in ms and GB/s.
//
//   cumulus-token-scan-bench PATH [SEQ_LEN [ROUNDS]]      defaults: seq_len 128, 5 rounds
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "base/command_line.h"
#include "data/npy.h"

namespace {

int run(int argc, char** argv) {
  namespace base = cumulus::base;
  CLI::App app{
      "How long TokenExamples::open takes on a .npy token stream: first and best of "
      "ROUNDS opens.",
      "cumulus-token-scan-bench"};
  base::setUpCommandLine(app);
  std::string path;
  long seq_len = 128;
  long rounds = 5;
  app.add_option("PATH", path, "a 1-D integer .npy file")->required()->type_name("");
  app.add_option("SEQ_LEN", seq_len, "window length (default 128)")
      ->type_name("")
      ->transform(base::integerIn(1, 1L << 30));
  app.add_option("ROUNDS", rounds, "rounds (default 5)")
      ->type_name("")
      ->transform(base::integerIn(1, 1000000));
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  double first = 0;
  double best = 1e30;
  int64_t tokens = 0;
  size_t bytes = 0;
  for (long r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const auto stream = cumulus::data::TokenExamples::open(path, seq_len);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r == 0) first = ms;
    best = std::min(best, ms);
    tokens = stream->tokenCount();
    bytes = static_cast<size_t>(tokens) * cumulus::data::NpyArray::open(path).itemSize();
  }
  std::printf("%s: %lld tokens (%.1f MB): open first %.1f ms, best of %ld %.1f ms (%.2f GB/s)\n",
              path.c_str(), static_cast<long long>(tokens), static_cast<double>(bytes) / 1e6, first,
              rounds, best, static_cast<double>(bytes) / best / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError("cumulus-token-scan-bench", e);
  }
}
