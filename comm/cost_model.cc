#include "comm/cost_model.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace cumulus::comm {
namespace {

// Measured on the development VM (2 vCPUs, Xeon with AVX-512, loopback TCP, BBR), with
// tests/comm/comm_perf (ranks as processes; its cpu figure is the CPU time of all ranks per op,
// which the other tenants of the box cannot inflate the way they inflate the wall clock):
// - α: a 4 KiB tree all-reduce takes ~6 µs per op at p=2 (2 messages) and ~20 µs at p=4
//   (4 messages); a ring step at p=4 costs ~11 µs (4 processes share 2 cores, so a step waits
//   for a wake-up). 10 µs per message.
// - β: a 64 MiB ring all-reduce at p=2 costs ~41 ms of CPU per op over both ranks, i.e.
//   ~21 ms on 2 idle cores for n = 64 MiB moved per rank: 0.3 ns/B (both copies of TCP included).
// - γ: the float32 sum kernel (AVX2 clone) on a hot 512 KiB landing segment and a cold
//   destination: 0.1 ns/B (0.04 ns/B when both are in cache, 0.19 when both are cold).
constexpr double kDefaultAlpha = 10e-6;
constexpr double kDefaultBeta = 0.3e-9;
constexpr double kDefaultGamma = 0.1e-9;

int ceilLog2(int p) {
  int levels = 0;
  while ((1 << levels) < p) ++levels;
  return levels;
}

}  // namespace

CostModel::CostModel() : CostModel(kDefaultAlpha, kDefaultBeta, kDefaultGamma) {}

CostModel::CostModel(double alpha, double beta, double gamma)
    : alpha_(alpha), beta_(beta), gamma_(gamma) {
  if (!(alpha >= 0) || !(beta >= 0) || !(gamma >= 0)) {
    throw std::invalid_argument("cost model parameters must be finite and >= 0");
  }
}

double CostModel::predict(Algorithm algorithm, double n, int p, bool funnelAvailable) const {
  const double q = p - 1;
  const double levels = ceilLog2(p);
  switch (algorithm) {
    case Algorithm::kFunnel:
      return 2 * q * (alpha_ + n * beta_) + q * n * gamma_;
    case Algorithm::kTree:
      return 2 * levels * (alpha_ + n * beta_) + levels * n * gamma_;
    case Algorithm::kRing:
      return 2 * q * alpha_ + 2 * q / p * n * beta_ + q / p * n * gamma_;
    case Algorithm::kAuto:
      return predict(pick(n, p, funnelAvailable), n, p, funnelAvailable);
  }
  return std::numeric_limits<double>::infinity();
}

Algorithm CostModel::pick(double n, int p, bool funnelAvailable) const {
  Algorithm best = Algorithm::kTree;
  double bestTime = predict(Algorithm::kTree, n, p);
  for (Algorithm a : {Algorithm::kRing, Algorithm::kFunnel}) {
    if (a == Algorithm::kFunnel && !funnelAvailable) continue;
    const double t = predict(a, n, p);
    if (t < bestTime) best = a, bestTime = t;
  }
  return best;
}

void CostModel::save(const std::string& path) const {
  std::ofstream out(path);
  out.precision(17);
  out << "# cumulus cost model: seconds per message, per byte moved, per byte reduced\n"
      << "alpha_s " << alpha_ << "\n"
      << "beta_s_per_byte " << beta_ << "\n"
      << "gamma_s_per_byte " << gamma_ << "\n";
  out.flush();
  if (!out) throw std::runtime_error("cannot write cost model file '" + path + "'");
}

CostModel CostModel::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read cost model file '" + path + "'");
  double values[3] = {0, 0, 0};
  bool seen[3] = {false, false, false};
  const char* keys[3] = {"alpha_s", "beta_s_per_byte", "gamma_s_per_byte"};
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string key, value, extra;
    if (!(fields >> key)) continue;
    const std::string where = "cost model file '" + path + "' line " + std::to_string(lineNo);
    int index = -1;
    for (int i = 0; i < 3; ++i) {
      if (key == keys[i]) index = i;
    }
    if (index < 0) {
      throw std::runtime_error(where + ": unknown key '" + key +
                               "' (expected alpha_s, beta_s_per_byte, gamma_s_per_byte)");
    }
    if (!(fields >> value) || (fields >> extra)) {
      throw std::runtime_error(where + ": expected '" + key + " <number>'");
    }
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(value.c_str(), &end);
    if (*end != '\0' || errno != 0 || !std::isfinite(v) || v < 0) {
      throw std::runtime_error(where + ": '" + value + "' is not a finite number >= 0");
    }
    values[index] = v;
    seen[index] = true;
  }
  for (int i = 0; i < 3; ++i) {
    if (!seen[i]) {
      throw std::runtime_error("cost model file '" + path + "' lacks '" + keys[i] + "'");
    }
  }
  return CostModel(values[0], values[1], values[2]);
}

}  // namespace cumulus::comm
