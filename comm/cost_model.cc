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

// Measured on the development VM (2 vCPUs, Xeon, loopback TCP), by the commands in the commit
// that set them (build/bin/comm_perf):
// - α: half the round trip of a 4 KiB tree all-reduce step between two processes, less the
//   bytes' share: ~12 µs per message, including the poll() wake-up.
// - β: one loopback stream moves 4.1 GB/s → 0.24 ns/B; with both directions of a ring busy on
//   2 cores it is nearer 0.35 ns/B, which is what we use.
// - γ: float32 sum kernel, 1 MiB operands, AVX2 clone: ~0.08 ns/B (~12 GB/s of output).
constexpr double kDefaultAlpha = 12e-6;
constexpr double kDefaultBeta = 0.35e-9;
constexpr double kDefaultGamma = 0.08e-9;

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
