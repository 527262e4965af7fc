#pragma once
// <cumulus/data_parallel.h>: data-parallel gradient sync, as PyTorch DDP: every rank's gradients
// become their sum over the group, reduced in buckets from autograd hooks while backward runs.
//
//   auto group = cumulus::ProcessGroup::fromEnvironment();
//   cumulus::DataParallel sync(*group);
//   sync.attach(net->parameters(), net->buffers());   // rank 0's values everywhere; buckets laid
//                                                     // out; buffers averaged at every step
//   for (...) {
//     optimizer.zero_grad();               // or sync.zeroGrad()
//     torch::Tensor loss = lossSum(net->forward(x), y) / global_batch;   // see below
//     sync.backward(loss);                 // backward + all-reduce; every .grad() is the sum
//     optimizer.step();
//   }
//
// The sum, not the mean: the sync is a plain SUM over ranks and never divides by the world size.
// Scale each rank's loss so that the sum over ranks is what you want: with a global batch of B
// samples split over the ranks, loss = (sum over this rank's samples of each sample's loss) / B
// gives exactly the gradient of the mean over the global batch, whatever the world size, an uneven
// split or gradient accumulation.
//
// GradientSync is the seam; its call order per optimizer step with k micro-batches:
//   for i in 0..k-1: beforeBackward(i == k-1); loss.backward(); afterBackward(i == k-1);
//   finish();  // now every .grad() holds the sum over all ranks
// `last` is true only for the micro-batch whose backward completes the local gradient:
// communication starts only then (earlier micro-batches accumulate locally). A rank whose share
// of a micro-batch is empty skips loss.backward() but still makes both calls; finish() then
// reduces the gradients no hook handed over (zeros, or earlier micro-batches' sums). backward(loss)
// is the whole sequence for k = 1.
//
// DataParallel, the implementation over a ProcessGroup:
//   - attach(params) checks that every rank has the same parameter list (shapes and dtypes; a
//     mismatch throws std::invalid_argument on every rank, naming the first rank that differs),
//     broadcasts rank 0's values so all replicas start identical, and lays the gradients out in
//     flat buckets in reverse registration order (bucket_cap_mb, and a small first bucket of
//     first_bucket_mb so communication starts early). As in DDP, by default each bucket is a
//     buffer of its own: gradients are copied in at launch and the sums copied back, so the
//     program may treat .grad() as it likes (optimizer.zero_grad() included). With
//     gradient_as_bucket_view each .grad() becomes a view into its bucket instead, so backward
//     accumulates straight into it and it is reduced in place, without the two copies: then
//     zero gradients in place (zeroGrad(), or .grad().zero_()), because LibTorch's
//     Optimizer::zero_grad() sets each gradient to none by default, which drops the view (the
//     next backward then allocates a gradient of its own). A gradient the program replaced anyway
//     is noticed and copied in and out, so results never depend on the mode.
//   - During the last micro-batch's backward each bucket is launched as soon as all its
//     gradients are ready and the buckets before it were launched; finish() launches the rest and
//     waits for all. The order is the same on every rank, and so are the results, bit for bit,
//     for a fixed algorithm and world size.
//   - In a group of one every call returns at once.
// Failure: a collective that fails or times out makes finish() (or attach()) throw its
// CommError (op, sequence number, peer); the group is broken afterwards. A gradient that arrives
// after its bucket was launched (a second backward in the last micro-batch) makes finish() throw
// std::logic_error.
// Thread-safety: call the methods from the training thread; the hooks run on whichever thread
// runs backward, and are locked internally.

#include <torch/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cumulus/errors.h"
#include "cumulus/options.h"

namespace cumulus {

class ProcessGroup;

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Once, before the first step; a blocking collective in a group.
  virtual void attach(const std::vector<torch::Tensor>& params) = 0;
  virtual void beforeBackward(bool last) = 0;
  virtual void afterBackward(bool last) = 0;
  // Blocks until every gradient holds the global sum; throws CommError if the group fails.
  virtual void finish() = 0;

  // One micro-batch that completes the step: beforeBackward(true), loss.backward(),
  // afterBackward(true), finish().
  void backward(const torch::Tensor& loss);
};

// A world of one: the local gradient already is the global sum.
class LocalGradientSync final : public GradientSync {
 public:
  void attach(const std::vector<torch::Tensor>&) override {}
  void beforeBackward(bool) override {}
  void afterBackward(bool) override {}
  void finish() override {}
};

// One bucket's all-reduce, from its launch to its completion (DataParallelOptions::on_bucket_done).
struct BucketEvent {
  size_t bucket = 0;      // index in launch order
  size_t bytes = 0;       // as all-reduced: 2 per element for a bucket compressed to bf16
  size_t params = 0;      // parameters in the bucket
  std::string algorithm;  // what it ran with ("ring", ...; "auto" resolved)
  uint64_t seq = 0;       // the collective's sequence number in the group
  bool failed = false;
  std::chrono::steady_clock::time_point launched;
  std::chrono::steady_clock::time_point completed;
};

struct DataParallelOptions {
  std::optional<Algorithm> algorithm;              // unset: the group's GroupOptions::algorithm
  double bucket_cap_mb = kDefaultBucketCapMb;      // the largest bucket (> 0)
  double first_bucket_mb = kDefaultFirstBucketMb;  // the first bucket launched in backward (> 0)
  double timeout_seconds = 0;  // attach's collectives and each bucket's wait; 0: the group's
  // kNone, or kBf16: float32 buckets are all-reduced as bfloat16 (half the bytes) with error
  // feedback: each rank keeps what rounding took from its gradient and adds it to the next step's,
  // so nothing is lost over time. Worth it on slow links (1 Gbit/s and below). The partial sums
  // are added in float32 and rounded to bf16 after each pairwise step. See errorFeedback().
  Compression compression = Compression::kNone;
  // Gradients as views into the buckets (no copies; zero them in place). See above.
  bool gradient_as_bucket_view = false;
  // Called on a background thread as each bucket's all-reduce completes (for a trace, or a
  // monitor); finish() returns only after every bucket of the step was reported. Must not block
  // for long or throw. Empty: no thread, nothing is timed.
  std::function<void(const BucketEvent&)> on_bucket_done;
};

// What the last finish() saw.
struct SyncStepStats {
  double comm_wait_seconds = 0;     // time blocked in finish(): launching the rest, then waiting
  size_t launched_in_backward = 0;  // buckets launched from hooks (overlapped with backward)
  size_t buckets = 0;
  size_t bytes = 0;    // bytes all-reduced (bf16 buckets count 2 per element)
  uint64_t steps = 0;  // finish() calls so far: whether a step ran since an earlier look
};

class DataParallel final : public GradientSync {
 public:
  // `group` must outlive this object. Throws GroupError naming a bad option.
  explicit DataParallel(ProcessGroup& group, DataParallelOptions options = {});
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  void attach(const std::vector<torch::Tensor>& params) override;
  // attach(params), and the model's buffers (batch norm's running statistics, say, as
  // module->buffers() returns them) kept identical on every rank: rank 0's values at attach, then
  // at every step their average over the ranks as the step's forward passes left them, all-reduced
  // while backward runs, in place once finish() returns (integer buffers floored).
  // Each replica's statistics then stand for the whole global batch (DDP's broadcast_buffers
  // copies rank 0's, of 1/size of the batch, at every step). One all-reduce per dtype, in that
  // dtype; buffers of a dtype it cannot sum (bool, uint8, complex: masks, constants) keep rank 0's
  // values from attach. std::invalid_argument when the ranks' lists differ.
  void attach(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& buffers);
  void beforeBackward(bool last) override;
  void afterBackward(bool last) override;
  void finish() override;

  // Zeroes, in place, the gradient of every parameter given to attach() that has one. Never
  // communicates.
  void zeroGrad();
  // Copies rank 0's values into every rank's `tensors` (buffers such as batch-norm statistics,
  // any dtype, any strides) with one broadcast. A collective: every rank passes the same shapes.
  void broadcast(const std::vector<torch::Tensor>& tensors);
  SyncStepStats lastStep() const;
  // The buckets' sizes in bytes, in launch order (after attach).
  std::vector<size_t> bucketBytes() const;

  // Compression bf16: this rank's error-feedback residuals (a copy), a 1-D float32 tensor over the
  // float32 parameters given to attach(), in their order; they differ between ranks, so a
  // checkpoint that must resume exactly keeps every rank's (cumulus-train does). Empty without
  // compression or in a group of one. Call between steps.
  torch::Tensor errorFeedback() const;
  // Replaces this rank's residuals with one errorFeedback() returned (after attach). Throws
  // std::invalid_argument for another element count, without compression, or in a group of one.
  void setErrorFeedback(const torch::Tensor& residual);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus
