// cumulus-pack-bench: what the live state transfer of recovery in place costs on each end beyond
// the network. The sender packs a checkpoint (packCheckpoint: pickling and SHA-256 of every file)
// and every receiver unpacks it (SHA-256 again, unpickling); a plain copy of the same bytes on
// each end is printed beside them, as the bound for any encoding. The state: PARAMS float32
// parameters in tensors of 1M elements, and SLOTS optimizer tensors per parameter (SGD with
// momentum 1, AdamW 2). Best of ROUNDS, in milliseconds.
//
//   cumulus-pack-bench [PARAMS [SLOTS [ROUNDS]]]   defaults: 3274634 (the convnet), 1, 5
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "base/command_line.h"
#include "cumulus/checkpoint.h"

namespace {

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int run(int argc, char** argv) {
  namespace base = cumulus::base;
  CLI::App app{"The live state transfer's cost on each end: packCheckpoint and unpackCheckpoint "
               "against a plain copy of the same bytes, best of ROUNDS, in ms.",
               "cumulus-pack-bench"};
  base::setUpCommandLine(app);
  long params = 3274634;
  long slots = 1;
  long rounds = 5;
  app.add_option("PARAMS", params, "float32 parameters (default 3274634, the convnet)")
      ->type_name("")
      ->transform(base::integerIn(1, 1L << 31));
  app.add_option("SLOTS", slots, "optimizer tensors per parameter (default 1)")
      ->type_name("")
      ->transform(base::integerIn(0, 4));
  app.add_option("ROUNDS", rounds, "rounds, the best counts (default 5)")
      ->type_name("")
      ->transform(base::integerIn(1, 1000));
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  torch::set_num_threads(1);

  cumulus::Checkpoint state;
  state.state.step = 100;
  constexpr long kChunk = 1 << 20;
  for (long at = 0, i = 0; at < params; at += kChunk, ++i) {
    const long n = std::min(kChunk, params - at);
    const std::string name = "layer" + std::to_string(i) + ".weight";
    state.tensors.emplace_back(name, torch::randn({n}));
    for (long s = 0; s < slots; ++s) {
      state.optimizer_tensors.emplace_back(name + ".slot" + std::to_string(s), torch::randn({n}));
    }
  }
  state.optimizer_scalars["name"] = std::string("adamw");
  state.optimizer_scalars["step"] = int64_t{100};

  double pack = 1e18, unpack = 1e18, copy = 1e18;
  size_t bytes = 0;
  for (long r = 0; r < rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    const std::string packed = cumulus::packCheckpoint(state);
    pack = std::min(pack, msSince(start));
    bytes = packed.size();
    start = std::chrono::steady_clock::now();
    const cumulus::Checkpoint back = cumulus::unpackCheckpoint(packed, "bench");
    unpack = std::min(unpack, msSince(start));
    // The bound: every tensor copied once into a contiguous buffer.
    start = std::chrono::steady_clock::now();
    std::string flat;
    flat.reserve(bytes);
    for (const auto* list : {&state.tensors, &state.optimizer_tensors}) {
      for (const auto& [name, t] : *list) {
        flat.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
      }
    }
    copy = std::min(copy, msSince(start));
  }
  std::printf("%ld parameters, %ld optimizer slot(s) each: %.1f MB packed; pack %.1f ms, unpack "
              "%.1f ms, a plain copy %.1f ms (best of %ld)\n",
              params, slots, static_cast<double>(bytes) / 1e6, pack, unpack, copy, rounds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError("cumulus-pack-bench", e);
  }
}
