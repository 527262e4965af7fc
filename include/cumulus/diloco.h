#pragma once
// <cumulus/diloco.h>: low-communication data parallelism, DiLoCo (Douillard et al., arXiv
// 2311.08105) and Streaming DiLoCo (arXiv 2501.18512), for workers on slow or distant links.
//
// Every worker trains its own replica for `inner_steps` (H) steps with its own optimizer and no
// communication. Then the workers average their outer gradients (the global parameters minus
// their replica's), an outer optimizer (SGD with Nesterov momentum) steps the global parameters,
// and every replica takes them. With `fragments` F > 1 (streaming) the parameters are split into F
// fragments of whole tensors, each synced at its own offset within the H steps, so that a round
// sends 1/F of the model at a time. Compared with a gradient all-reduce every step, the bytes
// sent fall by about H (more with compression).
//
//   auto group = cumulus::ProcessGroup::fromEnvironment();
//   cumulus::DataParallel(*group).broadcast(params);     // every replica starts from rank 0's
//   cumulus::DiLoCo diloco(params, options);            // the global parameters: a copy
//   for (int64_t step = 0; step < steps; ++step) {
//     diloco.beginStep(step, group.get());   // the fragment due now: synced (overlap: started)
//     optimizer.zero_grad();
//     (lossSum(net->forward(x), y) / local_batch).backward();   // this rank's own mean
//     diloco.endStep();                      // overlap: the started fragment lands
//     optimizer.step();                      // the inner optimizer (AdamW in the papers)
//   }
//   diloco.syncAll(group.get());             // the last round: every replica equals the global
//
// A fragment is due before step s (0-based, s > 0) when s % H equals its offset, ((f + 1) H / F)
// mod H: with F = 1 every H steps. beginStep does the round's communication before it changes
// anything, and endStep waits before it changes anything, so a collective that throws (a peer
// died) leaves this object and the replica as they were: re-form the group and call the same step
// again. The average is over the group passed in: a worker that died in the round is not in it,
// and its inner steps are dropped from the round.
//
// Outer compression: kNone sends float32; kBf16 all-reduces bfloat16; kInt8 sends int8 with one
// float32 scale per 256 values (every rank gathers every rank's and sums them in rank order, so
// that all replicas get the same bits). Both keep what rounding took from this rank's outer
// gradient and add it to the next round's (error feedback): over many rounds nothing is lost.
// The residual differs between ranks: a checkpoint that must resume exactly keeps every rank's.
//
// State: the global parameters and the outer momentum are the same on every rank; the replica's
// parameters, the inner optimizer and the residual are each rank's own. All float32.
// Thread-safety: one thread calls the methods.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cumulus/options.h"

namespace cumulus {

class ProcessGroup;

struct DiLoCoOptions {
  int64_t inner_steps = 50;     // H: inner steps per round (>= 1)
  double outer_lr = 0.7;        // the papers' outer SGD learning rate (> 0)
  double outer_momentum = 0.9;  // in [0, 1)
  bool nesterov = true;         // Nesterov momentum (needs outer_momentum > 0)
  int64_t fragments = 1;        // 1: DiLoCo; > 1: streaming (<= inner_steps, <= tensors)
  // The fragment's all-reduce runs during the next step's forward and backward; that step's
  // gradient, computed before the fragment's update, is applied after it (a delay of one step).
  bool overlap = false;
  // At the update, the share of its own values a replica keeps: local = mix local + (1 - mix)
  // global. 0: replicas take the global parameters exactly (in [0, 1)).
  double mix = 0.0;
  Compression outer_compression = Compression::kNone;  // kNone, kBf16 or kInt8
  double timeout_seconds = 0;                          // each outer collective; 0: the group's
};

// The state every rank shares, float32, in the order of the parameters given to the constructor.
struct DiLoCoState {
  std::vector<torch::Tensor> global;    // the global parameters
  std::vector<torch::Tensor> momentum;  // the outer optimizer's momentum buffers
};

// What the outer syncs have cost so far.
struct DiLoCoStats {
  int64_t rounds = 0;          // fragment syncs completed
  double wait_seconds = 0;     // blocked in them (overlap: waiting at endStep)
  uint64_t payload_bytes = 0;  // outer gradients encoded for the wire, before the collective
};

class DiLoCo {
 public:
  // `params`: the replica's parameters, float32, the same list on every rank; the global
  // parameters start as a copy of their values. Throws std::invalid_argument naming the option
  // that is out of range (fragments larger than the number of tensors included).
  DiLoCo(std::vector<torch::Tensor> params, DiLoCoOptions options);
  ~DiLoCo();
  DiLoCo(const DiLoCo&) = delete;
  DiLoCo& operator=(const DiLoCo&) = delete;

  // The model's buffers (batch norm's running statistics, say): averaged over the group (as
  // float64, integer buffers rounded) once a round, before the round's first fragment syncs, and
  // in syncAll, so that replicas that computed their own statistics for H steps agree again, as
  // their parameters do. A blocking collective of the buffers' bytes; empty: none (the default).
  // Bool and complex buffers (masks, constants) are left out.
  void attachBuffers(std::vector<torch::Tensor> buffers);
  // Each fragment's parameter indices, in order; every index is in exactly one.
  const std::vector<std::vector<size_t>>& fragments() const;
  // The fragment due before step `step`, or -1.
  int dueAt(int64_t step) const;

  // Before step `step`'s forward: syncs the fragment due (with overlap: starts its all-reduce).
  // `group`: the members taking part now; null alone. Throws the group's CommError.
  void beginStep(int64_t step, ProcessGroup* group);
  // Before the inner optimizer's step: with overlap, waits for the fragment beginStep started
  // and applies it. Throws the group's CommError; nothing changed then.
  void endStep();
  // Syncs every fragment now (a collective): after it every replica holds the global parameters.
  // Safe to call again on a re-formed group after a failure cut it short (Elastic::atEnd): the
  // members first agree on how much of it each landed, so no fragment moves twice.
  void syncAll(ProcessGroup* group);
  // Drops a started fragment without applying it (after a failed group: the round is redone).
  void cancel();
  // The outer learning rate of the syncs from now on (a schedule of the program's own); throws
  // std::invalid_argument unless it is above 0 and finite.
  void setOuterLr(double lr);
  double outerLr() const;

  // Copies; loadState checks every shape (std::invalid_argument) and changes nothing on a throw.
  DiLoCoState state() const;
  void loadState(const DiLoCoState& state);
  // The replica's parameters become the global ones (a member that joins, or resumes without
  // its own replica).
  void resetReplica();
  // This rank's error-feedback residual: 1-D float32 over all parameters in order (zeros without
  // compression). setResidual throws std::invalid_argument for another element count.
  torch::Tensor residual() const;
  void setResidual(const torch::Tensor& residual);
  DiLoCoStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus
