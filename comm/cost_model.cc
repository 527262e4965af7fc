#include "comm/cost_model.h"

#include <algorithm>
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

CostModel::CostModel(double alpha, double gamma, std::vector<BetaPoint> betas, int cores)
    : alpha_(alpha), beta_(0), gamma_(gamma), betas_(std::move(betas)), cores_(cores) {
  if (!(alpha >= 0) || !(gamma >= 0) || cores < 0) {
    throw std::invalid_argument("cost model parameters must be finite and >= 0");
  }
  for (const BetaPoint& b : betas_) {
    if (!(b.bytes > 0) || !(b.oneway >= 0) || !(b.duplex >= 0) || !(b.funnel >= 0)) {
      throw std::invalid_argument("cost model beta_at rows need bytes > 0 and betas >= 0");
    }
  }
  std::sort(betas_.begin(), betas_.end(),
            [](const BetaPoint& a, const BetaPoint& b) { return a.bytes < b.bytes; });
  if (!betas_.empty()) beta_ = betas_.back().oneway;
}

// Why a table, interpolated in log n: on loopback β is a memory-copy cost, and it depends on
// where the buffer lives. A 1 MiB all-reduce stays in L2/L3 and moved at 0.08 ns/B one way on
// the development VM; a 64 MiB one streams through DRAM at 0.2-0.6 ns/B. Between the calibrated
// sizes the cost moves smoothly with log n (one cache level after the other spills).
double CostModel::lookup(double n, double BetaPoint::*column) const {
  if (betas_.empty()) return beta_;
  if (n <= betas_.front().bytes) return betas_.front().*column;
  if (n >= betas_.back().bytes) return betas_.back().*column;
  size_t hi = 1;
  while (betas_[hi].bytes < n) ++hi;
  const BetaPoint& a = betas_[hi - 1];
  const BetaPoint& b = betas_[hi];
  const double t = std::log(n / a.bytes) / std::log(b.bytes / a.bytes);
  return a.*column + t * (b.*column - a.*column);
}

double CostModel::betaOneway(double n) const { return lookup(n, &BetaPoint::oneway); }
double CostModel::betaDuplex(double n) const { return lookup(n, &BetaPoint::duplex); }
double CostModel::betaFunnel(double n) const { return lookup(n, &BetaPoint::funnel); }

// Oversubscription, and why it is modelled this way. The formulas give the critical path with a
// core per rank. On loopback every β and γ term is CPU work (kernel copies, the sum kernel, the
// syscalls and wake-ups behind α), so p ranks on c < p cores cannot all run at once:
//   - ring: all p ranks are busy for the whole operation, each doing the same work, so each
//     gets c/p of a core and the whole time stretches by max(1, p/c);
//   - tree: the ranks are not all busy (the root does L levels, leaves one), so the time is the
//     longer of the critical path and the total CPU work spread over c cores. The total work is
//     p−1 messages up and p−1 down, each paid by both ends (2nβ), plus p−1 reductions:
//     (p−1)(2α + 2·2nβ + nγ) / c;
//   - funnel: the formula charges the server for its q = p−1 clients one after the other. The
//     ParameterServer is a gRPC server, though, whose handler threads serve the clients at once;
//     what bounds them is the c cores, shared by the q handlers and by the other end of every
//     transfer (the clients' serialize/parse, which runs while the server works): q + 1 busy
//     parties, so the server's q shares get c·q/(q+1) cores at most, and never less than one.
//     This factor is the least-assuming one that matches the shape measured on the VM (64 MiB:
//     239/332/403/927 ms at p = 2/3/4/8, i.e. 1, 1.4, 1.7, 3.9 × the p = 2 time; the factor
//     predicts 1, 1.5, 2, 4; the bare formula 1, 2, 3, 7). It is a fit of shape, not a law.
//     The divisor, max(1, c·q/(q+1)), is 1 at p = 2, where β_funnel was calibrated.
// With cores = 0 (unknown) none of this applies.
double CostModel::predict(Algorithm algorithm, double n, int p, bool funnelAvailable) const {
  const double q = p - 1;
  const double levels = ceilLog2(p);
  const double c = cores_;
  switch (algorithm) {
    case Algorithm::kFunnel: {
      const double b = betas_.empty() ? beta_ : betaFunnel(n);
      const double serial = 2 * q * (alpha_ + n * b) + q * n * gamma_;
      return c > 0 ? serial / std::max(1.0, c * q / (q + 1)) : serial;
    }
    case Algorithm::kTree: {
      const double b = betaOneway(n);
      const double path = 2 * levels * (alpha_ + n * b) + levels * n * gamma_;
      if (c <= 0) return path;
      return std::max(path, q * (2 * alpha_ + 4 * n * b + n * gamma_) / c);
    }
    case Algorithm::kRing: {
      const double b = betas_.empty() ? beta_ : betaDuplex(n);
      const double path = 2 * q * alpha_ + 2 * q / p * n * b + q / p * n * gamma_;
      return c > 0 ? path * std::max(1.0, p / c) : path;
    }
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
  if (cores_ > 0) out << "cores " << cores_ << "\n";
  for (const BetaPoint& b : betas_) {
    out << "beta_at " << b.bytes << " " << b.oneway << " " << b.duplex << " " << b.funnel << "\n";
  }
  out.flush();
  if (!out) throw std::runtime_error("cannot write cost model file '" + path + "'");
}

CostModel CostModel::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read cost model file '" + path + "'");
  double values[3] = {0, 0, 0};
  bool seen[3] = {false, false, false};
  const char* keys[3] = {"alpha_s", "beta_s_per_byte", "gamma_s_per_byte"};
  std::vector<BetaPoint> betas;
  int cores = 0;
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string key, value, extra;
    if (!(fields >> key)) continue;
    const std::string where = "cost model file '" + path + "' line " + std::to_string(lineNo);
    if (key == "cores") {
      if (!(fields >> cores) || cores < 0 || (fields >> extra)) {
        throw std::runtime_error(where + ": expected 'cores <integer >= 0>'");
      }
      continue;
    }
    if (key == "beta_at") {
      BetaPoint b;
      if (!(fields >> b.bytes >> b.oneway >> b.duplex >> b.funnel) || (fields >> extra) ||
          !(b.bytes > 0) || !(b.oneway >= 0) || !(b.duplex >= 0) || !(b.funnel >= 0)) {
        throw std::runtime_error(where +
                                 ": expected 'beta_at <bytes> <oneway> <duplex> <funnel>'"
                                 " with bytes > 0 and seconds per byte >= 0");
      }
      betas.push_back(b);
      continue;
    }
    int index = -1;
    for (int i = 0; i < 3; ++i) {
      if (key == keys[i]) index = i;
    }
    if (index < 0) {
      throw std::runtime_error(where + ": unknown key '" + key +
                               "' (expected alpha_s, beta_s_per_byte, gamma_s_per_byte, cores, "
                               "beta_at)");
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
  if (betas.empty() && cores == 0) return CostModel(values[0], values[1], values[2]);
  if (betas.empty()) betas.push_back({1, values[1], values[1], values[1]});
  return CostModel(values[0], values[2], std::move(betas), cores);
}

}  // namespace cumulus::comm
