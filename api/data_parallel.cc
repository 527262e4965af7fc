// GradientSync::backward and DataParallel (<cumulus/data_parallel.h>): the trainer's
// DistributedGradientSync over the group's communicator, or nothing at all in a group of one.

#include "cumulus/data_parallel.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "api/process_group_impl.h"
#include "distributed/bucket_layout.h"
#include "distributed/distributed_sync.h"

namespace cumulus {

void GradientSync::backward(const torch::Tensor& loss) {
  beforeBackward(true);
  loss.backward();
  afterBackward(true);
  finish();
}

namespace {

// The trainer's conversion (the same layout as cumulus-train's for the same figure), as a
// GroupError.
size_t bucketOption(double mb, const char* what) {
  try {
    return distributed::mebibytes(mb, what);
  } catch (const std::invalid_argument& e) {
    throw GroupError(e.what());
  }
}

distributed::DistributedSyncOptions syncOptions(const ProcessGroup::Impl& group,
                                                const DataParallelOptions& options) {
  distributed::DistributedSyncOptions out;
  out.algorithm = options.algorithm.value_or(group.algorithm);
  out.bucket_cap_bytes = bucketOption(options.bucket_cap_mb, "bucket_cap_mb");
  out.first_bucket_bytes = bucketOption(options.first_bucket_mb, "first_bucket_mb");
  out.timeout = options.timeout_seconds == 0
                    ? group.timeout
                    : timeoutOption(options.timeout_seconds, "timeout_seconds");
  if (options.compression == Compression::kInt8) {
    throw GroupError(
        "compression int8 is for DiLoCo's outer gradients (<cumulus/diloco.h>); "
        "a gradient all-reduce takes none or bf16");
  }
  out.compression = options.compression;
  out.on_bucket_done = options.on_bucket_done;
  out.gradient_as_bucket_view = options.gradient_as_bucket_view;
  return out;
}

}  // namespace

struct DataParallel::Impl {
  std::unique_ptr<distributed::DistributedGradientSync> distributed;  // null in a group of one
  LocalGradientSync local;
  std::vector<torch::Tensor> params;  // as given to attach()

  GradientSync& sync() {
    if (distributed) return *distributed;
    return local;
  }
};

DataParallel::DataParallel(ProcessGroup& group, DataParallelOptions options)
    : impl_(std::make_unique<Impl>()) {
  ProcessGroup::Impl& g = group.impl();
  // Validated alone too, so that a program tried alone fails on a bad option as it would in a
  // group.
  const distributed::DistributedSyncOptions sync_options = syncOptions(g, options);
  if (comm::Communicator* communicator = g.communicator()) {
    impl_->distributed =
        std::make_unique<distributed::DistributedGradientSync>(*communicator, sync_options);
  }
}

DataParallel::~DataParallel() = default;

void DataParallel::attach(const std::vector<torch::Tensor>& params) { attach(params, {}); }

void DataParallel::attach(const std::vector<torch::Tensor>& params,
                          const std::vector<torch::Tensor>& buffers) {
  impl_->sync().attach(params);
  if (impl_->distributed) impl_->distributed->attachBuffers(buffers);
  impl_->params = params;
}

void DataParallel::zeroGrad() {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : impl_->params) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}
void DataParallel::beforeBackward(bool last) { impl_->sync().beforeBackward(last); }
void DataParallel::afterBackward(bool last) { impl_->sync().afterBackward(last); }
void DataParallel::finish() { impl_->sync().finish(); }

void DataParallel::broadcast(const std::vector<torch::Tensor>& tensors) {
  if (impl_->distributed) impl_->distributed->broadcastTensors(tensors);
}

SyncStepStats DataParallel::lastStep() const {
  return impl_->distributed ? impl_->distributed->lastStep() : SyncStepStats{};
}

torch::Tensor DataParallel::errorFeedback() const {
  return impl_->distributed ? impl_->distributed->errorFeedback() : torch::zeros({0});
}

void DataParallel::setErrorFeedback(const torch::Tensor& residual) {
  if (!impl_->distributed) {
    throw std::invalid_argument(
        "setErrorFeedback: a group of one sends nothing and keeps no residual");
  }
  impl_->distributed->setErrorFeedback(residual);
}

std::vector<size_t> DataParallel::bucketBytes() const {
  std::vector<size_t> out;
  if (!impl_->distributed) return out;
  for (const distributed::BucketSpec& bucket : impl_->distributed->buckets()) {
    out.push_back(bucket.bytes());
  }
  return out;
}

}  // namespace cumulus
