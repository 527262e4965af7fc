#pragma once
// Command line of cumulus-bench (CLI11 through base/command_line.h). The coordinator and its
// worker processes parse the same argv (a worker gets the coordinator's arguments plus the hidden
// --worker), so both see one BenchOptions.

#include <chrono>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

#include "comm/algorithm.h"
#include "comm/types.h"

namespace cumulus::bench {

struct BenchOptions {
  std::string command;  // "allreduce" or "calibrate"
  cumulus::Algorithm algorithm = cumulus::Algorithm::kRing;
  int world = 2;
  // allreduce --hosts: simulate this many hosts on this machine, `world / hosts` consecutive
  // ranks on each (distinct CommunicatorOptions::host_id: shared memory within, TCP between).
  int hosts = 1;
  std::vector<size_t> sizes;  // bytes
  int iters = 0;              // 0 = adaptive per size (see itersFor)
  int warmup = -1;            // -1 = adaptive
  comm::DType dtype = comm::DType::kFloat32;
  std::string cost_model_path;  // --cost-model: predictions and auto picks; "" = built-in defaults
  std::string out = "cost_model.json";  // calibrate --out
  // calibrate --oversubscribed-world: the ranks that measure the busy_at table; -1 = twice the
  // cores (at most 64), 0 = skip it.
  int oversubscribed_world = -1;
  bool busy_phase = false;  // hidden: this group measures the busy_at table
  std::chrono::milliseconds timeout{120000};
  bool worker = false;  // hidden: this process is one rank
  bool help = false;    // --help was printed: exit 0
};

// Throws base::UsageError naming the offending flag and value. --help prints the usage on
// `help_out` and returns options with `help` set.
BenchOptions parseOptions(int argc, const char* const argv[], std::ostream& help_out = std::cout);
// "4K:256M" → {4096, 8192, …, 268435456} (×factor steps); suffixes K, M, G (powers of 1024), B or
// none for bytes. Throws base::UsageError naming --sizes.
std::vector<size_t> parseSizes(const std::string& text, size_t factor);
size_t parseBytes(const std::string& text);
std::string formatBytes(size_t bytes);  // "4K", "64M"
comm::DType parseDType(const std::string& name);

// Timed iterations for `bytes`: about 0.5 GiB moved per size, between 3 and 200.
int itersFor(size_t bytes);

}  // namespace cumulus::bench
