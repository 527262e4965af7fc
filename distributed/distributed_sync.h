#pragma once
// DistributedGradientSync: the multi-worker GradientSync (data_parallel.h), as PyTorch DDP's
// Reducer.
//
// attach(params) checks that every rank has the same parameter list (shapes and dtypes; a
// mismatch throws on every rank, naming the first rank that differs), broadcasts rank 0's values
// so all replicas start identical, and lays the gradients out in flat buckets
// (bucket_layout.h: reverse registration order, comm.bucket_cap_mb, a small first bucket of
// comm.first_bucket_mb). Each parameter's .grad() becomes a view into its bucket
// (DDP's gradient_as_bucket_view): backward accumulates straight into the bucket, which is
// reduced in place, so there is no copy in or out. Gradients that already lie in that layout
// (FlatParameters over the same list, as the trainer builds) are left where they are: those
// buffers are the buckets. That holds as long as the trainer keeps the
// gradient tensors (zero_() in place, as trainer.cc does); a gradient the caller replaced is
// detected at launch and copied in and back out instead, so correctness never depends on it.
//
// Overlap: during the LAST micro-batch's backward a post-hook on each parameter's gradient
// accumulator (it runs after the gradient was added to .grad()) marks the parameter ready. When
// every parameter of bucket i is ready and buckets 0..i-1 were launched, bucket i is launched
// with Communicator::allreduceAsync (SUM, comm.algorithm). Buckets launch in index order on every
// rank, so the collectives' sequence numbers agree. finish() launches what backward did not:
// a parameter that received no gradient this step (unused in the graph, or a rank that skipped
// backward) takes part with what its .grad() holds (zeros, or earlier micro-batches' sum). Then
// it waits for every bucket. Earlier micro-batches (last = false) only accumulate locally.
//
// Compression (comm.compression: bf16): each float32 bucket goes on the wire as bfloat16, half
// the bytes, with error feedback (1-bit SGD's and EF-SGD's remedy for a biased quantizer). Every
// rank keeps a float32 residual e per bucket element, zero at attach. At launch
//   g' = g + e;  q = bf16(g') (round to nearest even);  e = g' - float(q)  (exact in float32)
// and q is all-reduced (SUM) as DType::kBFloat16 from a staging buffer of the bucket's own; when
// the bucket's Work completes, finish() widens the sum back into the float32 bucket that the
// gradients view. So nothing a rank rounds away is lost: it is sent one step later. "Summation in
// float32" means what the bf16 kernels of comm/reduce.h do: each pairwise step widens both
// operands to float32, adds, and rounds the partial sum back to bf16; partial sums travel as bf16.
// The new residuals take effect when finish() succeeds: after a failed step each rank still holds
// those of the last completed step (an in-place recovery redoes the step from them).
// A non-finite g' leaves a zero residual (a NaN is not carried into every later step). Buckets of
// other dtypes (float64, ...) are sent as they are. The residuals are this rank's state: read and
// replace them with errorFeedback() / setErrorFeedback() between steps (a checkpoint keeps them).
//
// Failure: a failed or timed-out collective makes finish() throw its cumulus::CommError (op, seq,
// peer); the communicator is broken afterwards (comm/communicator.h), so the group must be
// rebuilt. A parameter whose gradient arrives after its bucket was launched (a second backward
// in the last micro-batch) makes finish() throw std::logic_error.
//
// Thread-safety: the GradientSync methods are called from the training thread; the hooks run
// on whichever thread runs backward (the caller's, for CPU). Internally locked.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/annotated_mutex.h"
#include "comm/algorithm.h"
#include "comm/communicator.h"
#include "comm/work.h"
#include "cumulus/data_parallel.h"
#include "distributed/bucket_layout.h"

namespace torch::autograd {
struct Node;
}

namespace cumulus::distributed {

class BufferAverage;

struct DistributedSyncOptions {
  Algorithm algorithm = Algorithm::kAuto;  // <cumulus/options.h>
  Compression compression = Compression::kNone;
  size_t bucket_cap_bytes = static_cast<size_t>(kDefaultBucketCapMb * (1 << 20));
  size_t first_bucket_bytes = static_cast<size_t>(kDefaultFirstBucketMb * (1 << 20));
  // Deadline of attach()'s collectives and of waiting for each bucket.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // true: gradients are views into the buckets, reduced where they lie (cumulus-train's
  // FlatParameters); false (DDP's default, and <cumulus/data_parallel.h>'s): copied into the
  // buckets and back.
  bool gradient_as_bucket_view = false;
  // Told of each bucket's all-reduce (launch → completion) from a watcher thread; finish() waits
  // until the step's buckets were all reported. Empty: no watcher (see <cumulus/data_parallel.h>).
  std::function<void(const BucketEvent&)> on_bucket_done;
};

class DistributedGradientSync final : public GradientSync {
 public:
  // `communicator` must outlive this object.
  DistributedGradientSync(comm::Communicator& communicator, DistributedSyncOptions options);
  ~DistributedGradientSync() override;
  DistributedGradientSync(const DistributedGradientSync&) = delete;
  DistributedGradientSync& operator=(const DistributedGradientSync&) = delete;

  // Blocking collectives (all ranks must call): see the header comment.
  void attach(const std::vector<torch::Tensor>& params) override;
  void beforeBackward(bool last) override;
  void afterBackward(bool last) override;
  void finish() override;

  // Copies rank 0's values into every rank's `tensors` (parameters, buffers; any dtype, any
  // strides) with one broadcast. All ranks must pass tensors of the same shapes and dtypes.
  void broadcastTensors(const std::vector<torch::Tensor>& tensors);

  // The model's buffers (batch norm's running statistics), after attach(): kept identical on every
  // rank. Checks that every rank has the same list and broadcasts rank 0's values (blocking
  // collectives). Then at every step, once the last micro-batch's forward has updated them
  // (beforeBackward(true)), one all-reduce per dtype (in that dtype) starts ahead of the gradient
  // buckets and runs while backward does, and finish() leaves every rank holding their average
  // over the ranks (integer buffers floored). So a replica's statistics stand for the whole
  // global batch rather than its own share, and every rank holds the same bits, at the cost of
  // the buffers' bytes (a batch norm layer's are 2 per channel) and no added wait where backward
  // outlasts them. Buffers of a dtype the reductions do not take (bool, uint8, complex: masks and
  // constants) keep rank 0's values from attach. A failed step leaves them as this rank's forward
  // left them.
  void attachBuffers(const std::vector<torch::Tensor>& buffers);

  const std::vector<BucketSpec>& buckets() const { return layout_; }
  SyncStepStats lastStep() const;

  // Error feedback (compression bf16): this rank's residuals, a copy, as a 1-D float32 tensor over
  // the float32 parameters given to attach() in their order (so it does not depend on the bucket
  // layout); an empty tensor without compression. Call between steps (not during backward).
  torch::Tensor errorFeedback() const;
  // Replaces the residuals with `residual`, as errorFeedback() returns it. Throws
  // std::invalid_argument if its element count differs, or without compression.
  void setErrorFeedback(const torch::Tensor& residual);
  // Elements errorFeedback() holds with compression on (after attach).
  size_t errorFeedbackNumel() const;

 private:
  struct Bucket;

  // A 1-D tensor over the bucket's memory when the parameters' gradients already lie there, in
  // the layout's order and offsets; undefined otherwise.
  torch::Tensor gradientsLaidOutAs(const BucketSpec& spec) const;
  void onGradReady(size_t param);
  void launchReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void launchLocked(size_t bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool compressed(const Bucket& bucket) const;
  // Parameter p's slice of its bucket's error-feedback residual; nullptr when the bucket is not
  // compressed.
  float* residualOf(size_t p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  size_t wireBytes(size_t bucket) const;
  void resetStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void launchBuffersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void watchLoop();
  void removeHooks();

  comm::Communicator& comm_;
  const DistributedSyncOptions options_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<BufferAverage> buffers_;  // attachBuffers()
  std::vector<BucketSpec> layout_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;  // param → bucket index
  // The accumulators must stay alive for the hooks to fire; the keys remove the hooks.
  std::vector<c10::intrusive_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  mutable base::Mutex mutex_;
  bool armed_ ABSL_GUARDED_BY(mutex_) = false;       // in the last micro-batch's backward
  std::vector<char> ready_ ABSL_GUARDED_BY(mutex_);  // per param
  size_t next_launch_ ABSL_GUARDED_BY(mutex_) = 0;
  size_t launched_in_backward_ ABSL_GUARDED_BY(mutex_) = 0;
  std::exception_ptr hook_error_ ABSL_GUARDED_BY(mutex_);
  bool buffers_launched_ ABSL_GUARDED_BY(mutex_) = false;  // this step's buffer all-reduces
  SyncStepStats last_ ABSL_GUARDED_BY(mutex_);

  // on_bucket_done only: a thread that stamps each bucket's completion time.
  base::Mutex watch_mutex_;
  base::CondVar watch_cv_;
  struct Watched {
    size_t bucket;
    std::shared_ptr<comm::Work> work;
    std::chrono::steady_clock::time_point launched;
  };
  std::deque<Watched> watch_queue_ ABSL_GUARDED_BY(watch_mutex_);
  size_t watch_unrecorded_ ABSL_GUARDED_BY(watch_mutex_) = 0;  // queued or being stamped
  bool watch_stop_ ABSL_GUARDED_BY(watch_mutex_) = false;
  std::thread watcher_;
};

// The comm dtype of a torch dtype; throws std::invalid_argument for the others ("a tensor of dtype
// Byte cannot take part (float32, ... can)").
comm::DType commDType(torch::ScalarType type);

}  // namespace cumulus::distributed
