#pragma once
// The α-β-γ cost model that picks an all-reduce algorithm (DESIGN.md "Communicator contract"):
//   α  latency of one message (s), β  transfer time per byte (s/B), γ  reduction time per byte.
// For n bytes on p ranks, L = ⌈log₂p⌉:
//   funnel ≈ 2(p−1)(α + nβ) + (p−1)nγ
//   tree   ≈ 2L(α + nβ) + L·nγ
//   ring   ≈ 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ
//
// Built-in defaults were measured on the 2-core development VM over loopback TCP (see
// defaults() in cost_model.cc for how); `cumulus-bench calibrate` measures a cluster and writes
// a file with save(), which workers read with load().
//
// File format (text, one "key value" per line, '#' starts a comment, all three keys required):
//   # cumulus cost model
//   alpha_s 1e-05
//   beta_s_per_byte 3e-10
//   gamma_s_per_byte 1e-10
//
// Thread-safety: a CostModel is an immutable value after construction; copy freely.

#include <string>

#include "comm/algorithm.h"

namespace cumulus::comm {

class CostModel {
 public:
  // The defaults measured on the development machine.
  CostModel();
  CostModel(double alpha, double beta, double gamma);

  double alpha() const { return alpha_; }
  double beta() const { return beta_; }
  double gamma() const { return gamma_; }

  // Predicted seconds for an all-reduce of `bytes` on `world` ranks. kAuto is the pick's time.
  double predict(Algorithm algorithm, double bytes, int world, bool funnelAvailable = false) const;
  // argmin over tree, ring (and funnel when a RemoteReducer is present); ties go to tree, then
  // ring. Never returns kAuto. Note: with one (α, β, γ) for all three, funnel never beats tree
  // (p−1 ≥ ⌈log₂p⌉ term by term), so funnel is only ever chosen explicitly.
  Algorithm pick(double bytes, int world, bool funnelAvailable = false) const;

  // Throws std::runtime_error naming the path (and line) when it cannot be written / parsed:
  // missing key, unknown key, non-numeric or negative value.
  void save(const std::string& path) const;
  static CostModel load(const std::string& path);

 private:
  double alpha_, beta_, gamma_;
};

}  // namespace cumulus::comm
