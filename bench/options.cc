#include "bench/options.h"

#include <algorithm>
#include <stdexcept>

namespace cumulus::bench {

const char kUsage[] =
    "usage:\n"
    "  cumulus-bench allreduce --algo {funnel,tree,ring,auto} --world-size P --sizes 4K:256M\n"
    "                          [--factor 2] [--iters N] [--warmup N] [--dtype float32]\n"
    "                          [--cost-model PATH] [--timeout-s 120]\n"
    "  cumulus-bench calibrate [--out PATH] [--oversubscribed-world P] [--sizes 1M:64M]\n"
    "                          [--factor 4]\n"
    "                          (P ranks measure the work when ranks outnumber cores; default\n"
    "                          twice the cores, at most 64; 0 skips that part)\n"
    "Ranks are processes on 127.0.0.1; the bench hosts the Store (and, for funnel, the\n"
    "parameter server) itself. Output: an nccl-tests-style table, then one JSON line per row.\n";

size_t parseBytes(const std::string& text) {
  if (text.empty()) throw std::invalid_argument("empty size");
  size_t used = 0;
  const unsigned long long value = std::stoull(text, &used);
  const std::string suffix = text.substr(used);
  size_t scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = size_t{1} << 10;
  else if (suffix == "M" || suffix == "m")
    scale = size_t{1} << 20;
  else if (suffix == "G" || suffix == "g")
    scale = size_t{1} << 30;
  else if (!suffix.empty() && suffix != "B")
    throw std::invalid_argument("bad size '" + text + "'");
  return static_cast<size_t>(value) * scale;
}

std::vector<size_t> parseSizes(const std::string& text, size_t factor) {
  const auto colon = text.find(':');
  const size_t lo = parseBytes(text.substr(0, colon));
  const size_t hi = colon == std::string::npos ? lo : parseBytes(text.substr(colon + 1));
  if (lo == 0 || hi < lo || factor < 2)
    throw std::invalid_argument("--sizes wants MIN:MAX with 0 < MIN <= MAX, got '" + text + "'");
  std::vector<size_t> sizes;
  for (size_t s = lo; s <= hi; s *= factor) sizes.push_back(s);
  return sizes;
}

std::string formatBytes(size_t bytes) {
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0)
    return std::to_string(bytes >> 30) + "G";
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0)
    return std::to_string(bytes >> 20) + "M";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

comm::DType parseDType(const std::string& name) {
  for (auto d :
       {comm::DType::kFloat32, comm::DType::kFloat64, comm::DType::kInt32, comm::DType::kInt64})
    if (name == comm::dtypeName(d)) return d;
  throw std::invalid_argument("--dtype '" + name + "': expected float32, float64, int32 or int64");
}

int itersFor(size_t bytes) {
  const double budget = 512.0 * (1 << 20);
  return std::clamp(static_cast<int>(budget / static_cast<double>(bytes)), 3, 200);
}

BenchOptions parseOptions(int argc, char** argv) {
  BenchOptions o;
  if (argc < 2) throw std::invalid_argument("missing command");
  o.command = argv[1];
  if (o.command != "allreduce" && o.command != "calibrate")
    throw std::invalid_argument("unknown command '" + o.command + "'");
  std::string sizes;
  size_t factor = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--worker") {
      o.worker = true;
      continue;
    }
    if (flag == "--busy-phase") {
      o.busyPhase = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--algo")
      o.algorithm = comm::parseAlgorithm(value);
    else if (flag == "--world-size")
      o.world = std::stoi(value);
    else if (flag == "--sizes")
      sizes = value;
    else if (flag == "--factor")
      factor = std::stoul(value);
    else if (flag == "--iters")
      o.iters = std::stoi(value);
    else if (flag == "--warmup")
      o.warmup = std::stoi(value);
    else if (flag == "--dtype")
      o.dtype = parseDType(value);
    else if (flag == "--cost-model")
      o.costModelPath = value;
    else if (flag == "--out")
      o.out = value;
    else if (flag == "--oversubscribed-world")
      o.oversubscribedWorld = std::stoi(value);
    else if (flag == "--timeout-s")
      o.timeout = std::chrono::milliseconds(std::stoi(value) * 1000);
    else
      throw std::invalid_argument("unknown option " + flag);
  }
  if (o.world < 1 || o.world > 64)
    throw std::invalid_argument("--world-size must be in [1, 64], got " + std::to_string(o.world));
  if (o.oversubscribedWorld < -1 || o.oversubscribedWorld > 64 || o.oversubscribedWorld == 1)
    throw std::invalid_argument("--oversubscribed-world must be 0 (skip) or in [2, 64], got " +
                                std::to_string(o.oversubscribedWorld));
  // calibrate's tables default to 1, 4, 16 and 64 MiB.
  const bool calibrate = o.command == "calibrate";
  if (sizes.empty()) sizes = calibrate ? "1M:64M" : "4K:256M";
  if (factor == 0) factor = calibrate ? 4 : 2;
  o.sizes = parseSizes(sizes, factor);
  return o;
}

}  // namespace cumulus::bench
