#include "comm/cost_model.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/regular_file.h"

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

// Log-linear interpolation in the buffer size, clamped at the table's ends (see lookup()).
template <class Row>
double interpolate(const std::vector<Row>& rows, double n, double Row::*column) {
  if (n <= rows.front().bytes) return rows.front().*column;
  if (n >= rows.back().bytes) return rows.back().*column;
  size_t hi = 1;
  while (rows[hi].bytes < n) ++hi;
  const Row& a = rows[hi - 1];
  const Row& b = rows[hi];
  const double t = std::log(n / a.bytes) / std::log(b.bytes / a.bytes);
  return a.*column + t * (b.*column - a.*column);
}

int ceilLog2(int p) {
  int levels = 0;
  while ((1 << levels) < p) ++levels;
  return levels;
}

}  // namespace

int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

CostModel::CostModel() : CostModel(kDefaultAlpha, kDefaultBeta, kDefaultGamma) {}

CostModel::CostModel(double alpha, double beta, double gamma)
    : alpha_(alpha),
      beta_(beta),
      gamma_(gamma),
      alpha_busy_(alpha),
      alpha_local_(kDefaultAlpha),
      beta_local_(kDefaultBeta) {
  if (!(alpha >= 0) || !(beta >= 0) || !(gamma >= 0)) {
    throw std::invalid_argument("cost model parameters must be finite and >= 0");
  }
}

CostModel::CostModel(double alpha, double gamma, std::vector<BetaPoint> betas, int cores)
    : CostModel(alpha, gamma, std::move(betas), cores, Oversubscribed()) {}

CostModel::CostModel(double alpha, double gamma, std::vector<BetaPoint> betas, int cores,
                     Oversubscribed busy)
    : alpha_(alpha),
      beta_(0),
      gamma_(gamma),
      betas_(std::move(betas)),
      cores_(cores),
      busy_(std::move(busy)),
      alpha_busy_(busy_.alpha < 0 ? alpha : busy_.alpha),
      alpha_local_(kDefaultAlpha),
      beta_local_(kDefaultBeta) {
  if (!(alpha >= 0) || !(gamma >= 0) || cores < 0) {
    throw std::invalid_argument("cost model parameters must be finite and >= 0");
  }
  for (const BetaPoint& b : betas_) {
    if (!(b.bytes > 0) || !(b.oneway >= 0) || !(b.duplex >= 0) || !(b.funnel >= 0)) {
      throw std::invalid_argument("cost model beta_at rows need bytes > 0 and betas >= 0");
    }
  }
  for (const WorkPoint& w : busy_.work) {
    if (!(w.bytes > 0) || !(w.tree >= 0) || !(w.ring >= 0)) {
      throw std::invalid_argument("cost model busy_at rows need bytes > 0 and work >= 0");
    }
  }
  if ((!busy_.work.empty() || busy_.alpha >= 0) && busy_.ranks <= cores_) {
    throw std::invalid_argument(
        "cost model: the busy terms need the ranks they were measured "
        "with, more than the cores");
  }
  std::sort(betas_.begin(), betas_.end(),
            [](const BetaPoint& a, const BetaPoint& b) { return a.bytes < b.bytes; });
  std::sort(busy_.work.begin(), busy_.work.end(),
            [](const WorkPoint& a, const WorkPoint& b) { return a.bytes < b.bytes; });
  if (!betas_.empty()) beta_ = betas_.back().oneway;
}

CostModel CostModel::withLocalLink(double alphaLocal, double betaLocal) const {
  if (!(alphaLocal >= 0) || !(betaLocal >= 0) || !std::isfinite(alphaLocal) ||
      !std::isfinite(betaLocal)) {
    throw std::invalid_argument("cost model local link parameters must be finite and >= 0");
  }
  CostModel copy = *this;
  copy.alpha_local_ = alphaLocal;
  copy.beta_local_ = betaLocal;
  copy.local_set_ = true;
  return copy;
}

// Why a table, interpolated in log n: on loopback β is a memory-copy cost, and it depends on
// where the buffer lives. A 1 MiB all-reduce stays in L2/L3 and moved at 0.08 ns/B one way on
// the development VM; a 64 MiB one streams through DRAM at 0.2-0.6 ns/B. Between the calibrated
// sizes the cost moves smoothly with log n (one cache level after the other spills).
double CostModel::lookup(double n, double BetaPoint::*column) const {
  return betas_.empty() ? beta_ : interpolate(betas_, n, column);
}

double CostModel::betaOneway(double n) const { return lookup(n, &BetaPoint::oneway); }
double CostModel::betaDuplex(double n) const { return lookup(n, &BetaPoint::duplex); }
double CostModel::betaFunnel(double n) const { return lookup(n, &BetaPoint::funnel); }
double CostModel::busyLookup(double n, int p) const {
  // Without measured rows the work is derived from the two-rank table: the same total as there.
  return busy_.ranks > 0 && !busy_.work.empty() ? n * p / busy_.ranks : n * p / 2;
}

double CostModel::workTree(double n) const {
  return busy_.work.empty() ? 4 * betaOneway(n) + gamma_
                            : interpolate(busy_.work, n, &WorkPoint::tree);
}
double CostModel::workRing(double n) const {
  return busy_.work.empty() ? 2 * betaDuplex(n) + gamma_
                            : interpolate(busy_.work, n, &WorkPoint::ring);
}

// Oversubscription, and why it is modelled this way. The formulas give the critical path with a
// core per rank. On loopback every β and γ term is CPU work (copies, the sum kernel, the
// syscalls and wake-ups behind α), so p ranks on c < p cores cannot all run at once:
//   - ring: all p ranks are busy for the whole operation, each doing the same work, and every
//     step waits for all of them, so they run in ⌈p/c⌉ waves: one rank's work, (q/p)·(2pα_b +
//     n·w_ring), times ⌈p/c⌉. Here w_ring, the CPU time per byte (of n) of one reduce-scatter
//     plus all-gather summed over the ranks, is 2β_duplex + γ and α_b is α if nothing else is
//     known (then at p = kc the time is exactly the path × p/c). The waves matter at p = 3 on
//     2 cores: measured 1.2–1.33× the p/c stretch, the waves say 4/3;
//   - tree: the ranks are not all busy (the root does L levels, leaves one), so the time is the
//     longer of the critical path and the total CPU work spread over c cores: p−1 edges, each a
//     message up and one down, each paid by both ends, and a reduction: q·(2α_b + n·w_tree)/c,
//     with w_tree = 4β_oneway + γ if nothing else is known;
//   - why α_b is measured (alpha_busy_s): α is the latency of a message to an idle rank, most
//     of it the wake-up; with more ranks than cores no core idles, and what a message costs is
//     the CPU time of its system calls. On the development VM: α = 7.1 µs, while a 4 KiB ring
//     at p = 4..8 ran at 3.0–3.7 µs per message; priced at α, the 1 MiB ring at p = 8 came out
//     1.6× too slow;
//   - why w is measured (busy_at, `cumulus-bench calibrate` at p = 2c) rather than derived: the
//     two-rank β prices a message's wall time with both ends running at once, not its CPU time.
//     Over shared memory the tree's receiver reduces straight from the sender's slot, so a
//     message up costs the sender a copy and the receiver the reduction, overlapped; the two-rank
//     fit hides the copy in that overlap, so 4β + γ misses one copy per edge. And once ranks
//     share a core every hand-off between them is a context switch that finds the caches cold:
//     on the development VM a 64 MiB ring or tree over p = 4..8 ranks ran 1.3–1.8× slower than
//     the derived work says, at 16 MiB 1.0–1.5× (bench/results/allreduce.md, run 6). Measured
//     at p = 2c, both effects are in w, and the q/c scaling carries it to other p;
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
//
// The host's working set. A model with cores describes ranks that share one host, and so its
// caches: an all-reduce of n bytes over p such ranks streams p·n bytes, which is what decides
// whether it runs from a cache or from DRAM. So the tree and the ring look their per-byte costs
// up at the size that had the same p·n when it was measured: n·p/2 in the two-rank β table, n·p/P
// in the busy table (P ranks). On the development VM the tree at p = 6–8 and 16 MiB (128 MiB in
// all at p = 8; the p = 4 calibration saw 64 MiB) ran 1.26–1.36× the prediction looked up at
// 16 MiB, and 1.09–1.20× looked up at the same total (bench/results/allreduce.md, runs 8 and 9).
// The funnel is left out: its β is the gRPC server's, and falls with n as per-call costs
// amortize, so a larger lookup would only undercount it.
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
      const double b = betaOneway(c > 0 ? n * p / 2 : n);
      const double path = 2 * levels * (alpha_ + n * b) + levels * n * gamma_;
      if (c <= 0) return path;
      if (p <= c) return std::max(path, q * (2 * alpha_ + n * (4 * b + gamma_)) / c);
      return std::max(path, q * (2 * alpha_busy_ + n * workTree(busyLookup(n, p))) / c);
    }
    case Algorithm::kRing: {
      const double b = betas_.empty() ? beta_ : betaDuplex(c > 0 ? n * p / 2 : n);
      const double path = 2 * q * alpha_ + 2 * q / p * n * b + q / p * n * gamma_;
      if (c <= 0 || p <= c) return path;
      const double waves = std::ceil(p / c);
      return std::max(path, waves * q / p * (2 * p * alpha_busy_ + n * workRing(busyLookup(n, p))));
    }
    case Algorithm::kHierarchical:
      return predictHierarchical(n, 1, p);
    case Algorithm::kAuto:
      return predict(pick(n, p, funnelAvailable), n, p, funnelAvailable);
  }
  return std::numeric_limits<double>::infinity();
}

// The local passes are priced with α_l, β_l; the cross ring with the link's α and β (no β table
// refinement beyond its duplex β at n: the table describes one host, not the link). The L cross
// rings of a host run at once over its one link, so together they move 2(H−1)/H·n through it,
// while each rank reduces only (H−1)/H of its n/L chunk.
double CostModel::predictHierarchical(double n, int hosts, int local) const {
  const double H = hosts;
  const double L = local;
  const double b = betas_.empty() ? beta_ : betaDuplex(n);
  const double inHost =
      2 * (L - 1) * alpha_local_ + 2 * (L - 1) / L * n * beta_local_ + (L - 1) / L * n * gamma_;
  const double acrossHosts =
      2 * (H - 1) * alpha_ + 2 * (H - 1) / H * n * b + (H - 1) / (H * L) * n * gamma_;
  return inHost + acrossHosts;
}

double CostModel::predict(Algorithm algorithm, double n, const Topology& topology,
                          bool funnelAvailable) const {
  switch (algorithm) {
    case Algorithm::kHierarchical:
      return topology.uniform() ? predictHierarchical(n, topology.hosts(), topology.localSize())
                                : predict(Algorithm::kRing, n, topology.world());
    case Algorithm::kAuto:
      return predict(pick(n, topology, funnelAvailable), n, topology, funnelAvailable);
    default:
      return predict(algorithm, n, topology.world(), funnelAvailable);
  }
}

Algorithm CostModel::pick(double n, const Topology& topology, bool funnelAvailable) const {
  const Algorithm flat = pick(n, topology.world(), funnelAvailable);
  if (topology.hosts() < 2 || !topology.uniform() || topology.localSize() < 2) return flat;
  const double hierarchical = predictHierarchical(n, topology.hosts(), topology.localSize());
  return hierarchical < predict(flat, n, topology.world()) ? Algorithm::kHierarchical : flat;
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

namespace {

// The file's keys, in the order save() writes them.
constexpr const char* kKnownKeys =
    "alpha_s, beta_s_per_byte, gamma_s_per_byte, alpha_local_s, beta_local_s_per_byte, cores, "
    "busy_ranks, alpha_busy_s, beta_at, busy_at";

// Reads a cost model file's JSON; every error names the file and, where there is one, the field.
class CostModelReader {
 public:
  CostModelReader(std::string path, const nlohmann::json& root)
      : path_(std::move(path)), root_(root) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw std::runtime_error("cost model file '" + path_ +
                             "': " + (field.empty() ? "" : "\"" + field + "\": ") + problem);
  }

  void checkKeys() const {
    if (!root_.is_object()) fail("", "expected a JSON object {\"alpha_s\": ..., ...}");
    const std::string known = std::string(", ") + kKnownKeys + ",";
    for (const auto& item : root_.items()) {
      if (known.find(", " + item.key() + ",") == std::string::npos) {
        fail(item.key(), std::string("unknown key (expected ") + kKnownKeys + ")");
      }
    }
  }

  bool has(const char* key) const { return root_.contains(key); }

  // A finite number >= 0 at `value`, which `field` names.
  double number(const nlohmann::json& value, const std::string& field) const {
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
      fail(field, "expected a finite number >= 0, got " + value.dump());
    }
    return value.get<double>();
  }
  double number(const char* key) const {
    if (!has(key)) fail("", std::string("lacks \"") + key + "\"");
    return number(root_.at(key), key);
  }

  int count(const char* key) const {
    if (!has(key)) return 0;
    const nlohmann::json& value = root_.at(key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > std::numeric_limits<int>::max()) {
      fail(key, "expected an integer >= 0, got " + value.dump());
    }
    return value.get<int>();
  }

  // The rows of the table `key`: each an object with exactly `columns`, "bytes" > 0.
  template <class Row>
  std::vector<Row> table(const char* key,
                         const std::vector<std::pair<const char*, double Row::*>>& columns) const {
    std::vector<Row> rows;
    if (!has(key)) return rows;
    const nlohmann::json& list = root_.at(key);
    if (!list.is_array()) fail(key, "expected a list of rows, got " + list.dump());
    std::string shape;
    for (const auto& column : columns)
      shape += std::string(shape.empty() ? "" : ", ") + column.first;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = std::string(key) + "[" + std::to_string(i) + "]";
      const nlohmann::json& row = list[i];
      if (!row.is_object() || row.size() != columns.size()) {
        fail(field, "expected an object with exactly " + shape + ", got " + row.dump());
      }
      Row parsed;
      for (const auto& [name, member] : columns) {
        if (!row.contains(name)) fail(field, std::string("lacks \"") + name + "\"");
        parsed.*member = number(row.at(name), field + "." + name);
      }
      if (!(parsed.bytes > 0)) fail(field + ".bytes", "expected a size in bytes > 0, got 0");
      rows.push_back(parsed);
    }
    return rows;
  }

 private:
  std::string path_;
  const nlohmann::json& root_;
};

const std::vector<std::pair<const char*, double CostModel::BetaPoint::*>> kBetaColumns = {
    {"bytes", &CostModel::BetaPoint::bytes},
    {"oneway", &CostModel::BetaPoint::oneway},
    {"duplex", &CostModel::BetaPoint::duplex},
    {"funnel", &CostModel::BetaPoint::funnel}};
const std::vector<std::pair<const char*, double CostModel::WorkPoint::*>> kWorkColumns = {
    {"bytes", &CostModel::WorkPoint::bytes},
    {"tree", &CostModel::WorkPoint::tree},
    {"ring", &CostModel::WorkPoint::ring}};

}  // namespace

// Written to PATH.tmp and renamed over PATH, so a reader (or a calibrate that dies half way)
// never leaves a torn file behind.
void CostModel::save(const std::string& path) const {
  nlohmann::ordered_json root;
  root["alpha_s"] = alpha_;
  root["beta_s_per_byte"] = beta_;
  root["gamma_s_per_byte"] = gamma_;
  if (local_set_) {
    root["alpha_local_s"] = alpha_local_;
    root["beta_local_s_per_byte"] = beta_local_;
  }
  if (cores_ > 0) root["cores"] = cores_;
  if (busy_.ranks > 0) root["busy_ranks"] = busy_.ranks;
  if (busy_.alpha >= 0) root["alpha_busy_s"] = busy_.alpha;
  if (!betas_.empty()) {
    root["beta_at"] = nlohmann::ordered_json::array();
    for (const BetaPoint& b : betas_) {
      root["beta_at"].push_back(
          {{"bytes", b.bytes}, {"oneway", b.oneway}, {"duplex", b.duplex}, {"funnel", b.funnel}});
    }
  }
  if (!busy_.work.empty()) {
    root["busy_at"] = nlohmann::ordered_json::array();
    for (const WorkPoint& w : busy_.work) {
      root["busy_at"].push_back({{"bytes", w.bytes}, {"tree", w.tree}, {"ring", w.ring}});
    }
  }
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp);
  out << root.dump(2) << "\n";  // doubles are written with the digits that read back exactly
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write cost model file '" + path + "'");
  }
}

// Files in the earlier "key value" text format are refused rather than read: one parser for one
// format, and a re-run of `cumulus-bench calibrate` rewrites them (the committed ones under
// bench/results/ were converted).
CostModel CostModel::load(const std::string& path) {
  // Only a regular file: every worker reads it as it connects, and a FIFO would hold them all in
  // open(2) until a writer came.
  std::string problem;
  const std::optional<std::string> read = base::readRegularFile(path, problem);
  if (!read) throw std::runtime_error("cost model file '" + path + "': " + problem);
  const std::string& text = *read;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] != '{' &&
      (text.compare(first, 1, "#") == 0 || text.compare(first, 8, "alpha_s ") == 0)) {
    throw std::runtime_error("cost model file '" + path +
                             "' is in the text format of earlier versions; re-run "
                             "`cumulus-bench calibrate --out " +
                             path + "` to measure it again as JSON");
  }
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: ..."
    const std::string what = e.what();
    const size_t at = what.find("parse error");
    throw std::runtime_error("cost model file '" + path + "' is not valid JSON: " +
                             (at == std::string::npos ? what : what.substr(at)));
  }
  const CostModelReader reader(path, root);
  reader.checkKeys();
  const double alpha = reader.number("alpha_s");
  const double beta = reader.number("beta_s_per_byte");
  const double gamma = reader.number("gamma_s_per_byte");
  const int cores = reader.count("cores");
  Oversubscribed busy;
  busy.ranks = reader.count("busy_ranks");
  if (reader.has("alpha_busy_s")) busy.alpha = reader.number("alpha_busy_s");
  std::vector<BetaPoint> betas = reader.table("beta_at", kBetaColumns);
  busy.work = reader.table("busy_at", kWorkColumns);
  if (!busy.work.empty() || busy.alpha >= 0) {
    const std::string what = busy.alpha >= 0 ? "alpha_busy_s" : "busy_at";
    if (cores == 0) {
      reader.fail(what,
                  "needs \"cores\": it prices ranks that outnumber the cores, so say how "
                  "many cores were measured");
    }
    if (busy.ranks <= cores) {
      reader.fail(what, "needs \"busy_ranks\" above the " + std::to_string(cores) +
                            " cores: say how many ranks it was measured with");
    }
  }
  auto withLocal = [&](CostModel model) {
    if (!reader.has("alpha_local_s") && !reader.has("beta_local_s_per_byte")) return model;
    return model.withLocalLink(
        reader.has("alpha_local_s") ? reader.number("alpha_local_s") : model.alphaLocal(),
        reader.has("beta_local_s_per_byte") ? reader.number("beta_local_s_per_byte")
                                            : model.betaLocal());
  };
  if (betas.empty() && cores == 0) return withLocal(CostModel(alpha, beta, gamma));
  if (betas.empty()) betas.push_back({1, beta, beta, beta});
  return withLocal(CostModel(alpha, gamma, std::move(betas), cores, std::move(busy)));
}

}  // namespace cumulus::comm
