#include "bench/options.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "base/command_line.h"

namespace cumulus::bench {
namespace {

using base::UsageError;

// Flags both commands take.
void addCommonFlags(CLI::App& command, BenchOptions& o, std::string& sizes, int& factor) {
  command.add_option("--sizes", sizes, "message sizes MIN:MAX, suffixes K, M, G")
      ->type_name("MIN:MAX");
  command.add_option("--factor", factor, "step between sizes")
      ->type_name("F")
      ->transform(base::integerIn(2, 1024));
  command
      .add_option_function<int>(
          "--timeout-s", [&o](int s) { o.timeout = std::chrono::milliseconds(s * 1000LL); },
          "deadline of every collective, in seconds (default 120)")
      ->type_name("S")
      ->transform(base::integerIn(1, 86400));
  command.add_flag("--worker", o.worker)->group("");  // hidden: a rank that runGroup started
}

void addAllreduceFlags(CLI::App& command, BenchOptions& o) {
  command
      .add_option_function<std::string>(
          "--algo",
          [&o](const std::string& v) {
            try {
              o.algorithm = cumulus::parseAlgorithm(v);
            } catch (const cumulus::UserError& e) {
              throw UsageError("--algo: " + std::string(e.what()));
            }
          },
          "funnel, tree, ring, hierarchical or auto (default ring)")
      ->type_name("ALGO");
  command
      .add_option("--hosts", o.hosts,
                  "simulate H hosts: world/H consecutive ranks share each, TCP between them "
                  "(default 1)")
      ->type_name("H")
      ->transform(base::integerIn(1, 64));
  command.add_option("--world-size", o.world, "ranks, processes on 127.0.0.1 (default 2)")
      ->type_name("P")
      ->transform(base::integerIn(1, 64));
  command.add_option("--iters", o.iters, "timed iterations per size (default: adaptive)")
      ->type_name("N")
      ->transform(base::integerIn(1, 1000000));
  command.add_option("--warmup", o.warmup, "warm-up iterations per size (default: adaptive)")
      ->type_name("N")
      ->transform(base::integerIn(0, 1000000));
  command
      .add_option_function<std::string>(
          "--dtype", [&o](const std::string& v) { o.dtype = parseDType(v); },
          "float32, float64, int32 or int64 (default float32)")
      ->type_name("TYPE");
  command
      .add_option("--cost-model", o.cost_model_path,
                  "cost model for predictions and auto (default: built-in)")
      ->type_name("PATH");
}

void addCalibrateFlags(CLI::App& command, BenchOptions& o) {
  command.add_option("--out", o.out, "where the cost model goes (default cost_model.json)")
      ->type_name("PATH");
  command
      .add_option("--oversubscribed-world", o.oversubscribed_world,
                  "ranks that measure the busy_at table (default twice the cores, at most 64; "
                  "0 skips it)")
      ->type_name("P")
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "0") return "";
            int64_t p = 0;
            try {
              p = base::parseInteger(v, "", 2, 64);
            } catch (const UsageError&) {
              return "expected 0 (skip) or an integer in [2, 64], got \"" + v + "\"";
            }
            v = std::to_string(p);
            return "";
          },
          ""));
  command.add_flag("--busy-phase", o.busy_phase)->group("");  // hidden: the busy_at group
}

}  // namespace

size_t parseBytes(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix == "K" || suffix == "k")
    shift = 10;
  else if (suffix == "M" || suffix == "m")
    shift = 20;
  else if (suffix == "G" || suffix == "g")
    shift = 30;
  else if (!suffix.empty() && suffix != "B")
    digits = 0;  // not a size
  if (digits == 0 || digits > 12) {
    throw UsageError("--sizes: expected a size such as 4096, 4K, 64M or 1G, got \"" + text + "\"");
  }
  return static_cast<size_t>(std::stoull(text.substr(0, digits))) << shift;
}

std::vector<size_t> parseSizes(const std::string& text, size_t factor) {
  const auto colon = text.find(':');
  const size_t lo = parseBytes(text.substr(0, colon));
  const size_t hi = colon == std::string::npos ? lo : parseBytes(text.substr(colon + 1));
  if (lo == 0 || hi < lo || factor < 2)
    throw UsageError("--sizes wants MIN:MAX with 0 < MIN <= MAX, got '" + text + "'");
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
  throw UsageError("--dtype: expected float32, float64, int32 or int64, got \"" + name + "\"");
}

int itersFor(size_t bytes) {
  const double budget = 512.0 * (1 << 20);
  return std::clamp(static_cast<int>(budget / static_cast<double>(bytes)), 3, 200);
}

BenchOptions parseOptions(int argc, const char* const argv[], std::ostream& help_out) {
  BenchOptions o;
  CLI::App app{"Collective benchmarks: ranks are processes on 127.0.0.1.", "cumulus-bench"};
  base::setUpCommandLine(app, base::kCommonExitCodes,
                         "The bench hosts the Store (and, for funnel, the parameter server) "
                         "itself. Output: an nccl-tests-style table, then one JSON line per row.");
  app.require_subcommand(1);
  std::string sizes;
  int factor = 0;
  CLI::App* allreduce = app.add_subcommand("allreduce", "an all-reduce sweep over sizes");
  CLI::App* calibrate =
      app.add_subcommand("calibrate", "measure the cost model's alpha, beta, gamma here");
  for (CLI::App* command : {allreduce, calibrate}) {
    base::setUpCommandLine(*command);
    addCommonFlags(*command, o, sizes, factor);
  }
  addAllreduceFlags(*allreduce, o);
  addCalibrateFlags(*calibrate, o);
  o.help = !base::parseCommandLine(app, argc, argv, help_out);
  if (o.help) return o;
  o.command = calibrate->parsed() ? "calibrate" : "allreduce";
  // calibrate's tables default to 1, 4, 16 and 64 MiB.
  const bool is_calibrate = o.command == "calibrate";
  if (sizes.empty()) sizes = is_calibrate ? "1M:64M" : "4K:256M";
  if (factor == 0) factor = is_calibrate ? 4 : 2;
  o.sizes = parseSizes(sizes, static_cast<size_t>(factor));
  if (o.world % o.hosts != 0) {
    throw UsageError("--hosts " + std::to_string(o.hosts) + " does not divide --world-size " +
                     std::to_string(o.world) + ": give each host the same number of ranks");
  }
  return o;
}

}  // namespace cumulus::bench
