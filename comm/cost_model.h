#pragma once
// The α-β-γ cost model that picks an all-reduce algorithm (docs/comm.md, "Cost model"):
//   α  latency of one message (s), β  transfer time per byte (s/B), γ  reduction time per byte.
// For n bytes on p ranks, k = ⌈log₂p⌉:
//   funnel ≈ 2(p−1)(α + nβ) + (p−1)nγ
//   tree   ≈ 2k(α + nβ) + k·nγ
//   ring   ≈ 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ
// and, for H hosts of L ranks each (p = HL; α_l, β_l the costs between ranks of one host):
//   hierarchical ≈ 2(L−1)α_l + 2(L−1)/L·nβ_l + (L−1)/L·nγ          (reduce-scatter + all-gather
//                                                                    inside the host)
//                + 2(H−1)α + 2(H−1)/H·nβ + (H−1)/(H·L)·nγ           (a ring across hosts on n/L
//                                                                    bytes per rank; the host's
//                                                                    L rings share its link)
// The flat ring across hosts is the ring formula with the link's α and β. α_l and β_l default to
// the built-in α and β, which were measured between ranks of one host; a cluster's file may
// set them ("alpha_local_s", "beta_local_s_per_byte"). The hierarchical term has no refinements
// below: β there is the scalar (or the table's duplex β at n), with no oversubscription.
//
// Refinements for ranks that share one host (loopback), all optional, all measured by
// `cumulus-bench calibrate` (see cost_model.cc for the derivations):
//   - β per size regime and per pattern: a table of (bytes, β_oneway, β_duplex, β_funnel),
//     interpolated log-linearly in the buffer size n and clamped at its ends. β_oneway prices
//     a message that only one side of a pair sends (tree), β_duplex one sent while the same rank
//     also receives one (every ring step), β_funnel the gRPC path of the funnel.
//   - cores c: when p ranks outnumber c cores the CPU-bound terms stretch (ring: ×max(1, p/c);
//     tree: never below its total CPU work / c).
//   - the CPU cost of ranks that outnumber cores, measured with P = 2c ranks: per message
//     (α_busy) and per byte, a table of (bytes, w_tree, w_ring); they replace the α and the work
//     the formulas derive from the two-rank β (see predict() in cost_model.cc for why).
//   - the host's working set: the ranks of a calibrated model share one host and its caches, so
//     the tree's and the ring's per-byte costs are looked up at the same p·n bytes in total as
//     they were measured at (n·p/2 in the β table, n·p/P in the busy table).
// Without them (the 3-argument constructor, a 3-key file) the formulas above are used as is.
//
// Built-in defaults were measured on the 2-core development VM over loopback TCP (see
// defaults() in cost_model.cc for how); `cumulus-bench calibrate` measures a cluster and writes
// a file with save(), which workers read with load().
//
// File format: one JSON object; the first three keys required, the others optional, no other
// keys. Seconds, and seconds per byte:
//   {"alpha_s": 1e-05, "beta_s_per_byte": 3e-10, "gamma_s_per_byte": 1e-10,
//    "alpha_local_s": 1e-05, "beta_local_s_per_byte": 3e-10,     (hierarchical's α_l, β_l)
//    "cores": 2,
//    "busy_ranks": 4,                  (the P the next two were measured with; > cores)
//    "alpha_busy_s": 3e-06,            (needs busy_ranks)
//    "beta_at": [{"bytes": 1048576, "oneway": 1e-10, "duplex": 3e-10, "funnel": 2e-9}, ...],
//    "busy_at": [{"bytes": 1048576, "tree": 6e-10, "ring": 4e-10}, ...]}   (needs busy_ranks)
// Files in the text format of earlier versions are refused with a message to re-calibrate.
//
// Thread-safety: a CostModel is an immutable value after construction; copy freely.

#include <string>
#include <vector>

#include "comm/algorithm.h"
#include "comm/topology.h"

namespace cumulus::comm {

// The CPUs this process may run on: its affinity mask, which `taskset` and cpuset containers
// narrow (hardware_concurrency() where the mask cannot be read). The `cores` a model is
// calibrated with, and what the trainer divides among its local workers.
int usableCores();

class CostModel {
 public:
  // One row of the β table: seconds per byte at buffer size `bytes`.
  struct BetaPoint {
    double bytes = 0;
    double oneway = 0;
    double duplex = 0;
    double funnel = 0;
  };

  // One row of the oversubscribed-work table: CPU seconds per byte, at buffer size `bytes`, that
  // one edge of the tree (a message up, a message down, a reduction, both ends' share) and one
  // rank of the ring (its whole reduce-scatter and all-gather) cost when p > cores.
  struct WorkPoint {
    double bytes = 0;
    double tree = 0;
    double ring = 0;
  };

  // What ranks beyond the cores cost, measured with `ranks` of them (> cores): per message
  // (`alpha`, < 0: α) and per byte (`work`).
  struct Oversubscribed {
    int ranks = 0;
    double alpha = -1;
    std::vector<WorkPoint> work;
  };

  // The defaults measured on the development machine.
  CostModel();
  CostModel(double alpha, double beta, double gamma);
  // The refined model: `betas` sorted or not (it is sorted here), `cores` 0 = do not model
  // oversubscription. beta() is then the β_oneway of the largest row.
  // `busy` prices the ranks beyond the cores; throws std::invalid_argument when it has rows but
  // ranks <= cores.
  CostModel(double alpha, double gamma, std::vector<BetaPoint> betas, int cores,
            Oversubscribed busy);
  CostModel(double alpha, double gamma, std::vector<BetaPoint> betas, int cores);

  // This model with α_l and β_l, the costs between ranks of one host (hierarchical's local
  // passes); throws std::invalid_argument unless both are finite and >= 0.
  CostModel withLocalLink(double alphaLocal, double betaLocal) const;

  double alpha() const { return alpha_; }
  double alphaLocal() const { return alpha_local_; }
  double betaLocal() const { return beta_local_; }
  double alphaBusy() const { return alpha_busy_; }
  double beta() const { return beta_; }
  double gamma() const { return gamma_; }
  int cores() const { return cores_; }
  const std::vector<BetaPoint>& betas() const { return betas_; }
  const std::vector<WorkPoint>& busy() const { return busy_.work; }
  int busyRanks() const { return busy_.ranks; }
  // β for a buffer of `bytes` (the scalar β when there is no table).
  double betaOneway(double bytes) const;
  double betaDuplex(double bytes) const;
  double betaFunnel(double bytes) const;
  // The work per byte used when p > cores: the busy_at table's (its rows as measured, at P
  // ranks), or else what the two-rank β implies (tree 4β_oneway + γ, ring 2β_duplex + γ).
  double workTree(double bytes) const;
  double workRing(double bytes) const;

  // Predicted seconds for an all-reduce of `bytes` on `world` ranks of one host (kHierarchical:
  // H = 1, L = world). kAuto is the pick's time.
  double predict(Algorithm algorithm, double bytes, int world, bool funnelAvailable = false) const;
  // The same on `topology`: kHierarchical is predictHierarchical() when the topology is uniform
  // and the ring otherwise (what it runs); the others do not look at hosts.
  double predict(Algorithm algorithm, double bytes, const Topology& topology,
                 bool funnelAvailable = false) const;
  // The two-level formula above for `hosts` × `local` ranks.
  double predictHierarchical(double bytes, int hosts, int local) const;
  // argmin over tree, ring (and funnel when a RemoteReducer is present); ties go to tree, then
  // ring. Never returns kAuto. Note: with one (α, β, γ) for all three, funnel never beats tree
  // (p−1 ≥ ⌈log₂p⌉ term by term), so funnel is only ever chosen explicitly.
  Algorithm pick(double bytes, int world, bool funnelAvailable = false) const;
  // The same, and hierarchical when the topology has H ≥ 2 hosts of L ≥ 2 ranks each, all alike,
  // and it is strictly cheaper than the best of the others.
  Algorithm pick(double bytes, const Topology& topology, bool funnelAvailable = false) const;

  // save() replaces the file whole (a temporary, then rename).
  // Throws std::runtime_error naming the path (and the field) when it cannot be written / read:
  // not JSON, the old text format, a missing or unknown key, a non-numeric or negative value.
  void save(const std::string& path) const;
  static CostModel load(const std::string& path);

 private:
  double lookup(double bytes, double BetaPoint::*column) const;
  // The size to look workTree/workRing up at for `bytes` on `p` ranks (the host's working set).
  double busyLookup(double bytes, int p) const;

  double alpha_, beta_, gamma_;
  std::vector<BetaPoint> betas_;  // sorted by bytes; empty: beta_ everywhere
  int cores_ = 0;
  Oversubscribed busy_;              // work sorted by bytes; empty: derived from β and γ
  double alpha_busy_;                // α unless measured
  double alpha_local_, beta_local_;  // hierarchical's α_l, β_l
  bool local_set_ = false;           // given by withLocalLink() or a file: save() writes them
};

}  // namespace cumulus::comm
