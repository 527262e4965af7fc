// ProcessGroup's collectives, point-to-point and Work (<cumulus/process_group.h>) over the
// communicator of its GroupConnection (distributed/group_connection.h). Making the group is
// process_group_setup.cc's.

#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "api/process_group_impl.h"
#include "comm/types.h"
#include "distributed/distributed_sync.h"

namespace cumulus {
namespace {

comm::DType dtypeOf(const char* op, const torch::Tensor& tensor) {
  try {
    return distributed::commDType(tensor.scalar_type());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(op) + ": " + e.what());
  }
}

// Throws std::invalid_argument unless `tensor` can take part in a collective.
comm::DType checkTensor(const char* op, const torch::Tensor& tensor) {
  if (!tensor.defined()) throw std::invalid_argument(std::string(op) + ": the tensor is undefined");
  if (!tensor.device().is_cpu()) {
    throw std::invalid_argument(std::string(op) + ": the tensor is on " + tensor.device().str() +
                                "; collectives take CPU tensors (move it with .cpu())");
  }
  return dtypeOf(op, tensor);
}

// Throws std::invalid_argument unless `tensor` is a dense CPU tensor; any dtype (for the
// collectives that only move bytes).
void checkBytes(const char* op, const torch::Tensor& tensor) {
  if (!tensor.defined()) throw std::invalid_argument(std::string(op) + ": the tensor is undefined");
  if (!tensor.device().is_cpu()) {
    throw std::invalid_argument(std::string(op) + ": the tensor is on " + tensor.device().str() +
                                "; collectives take CPU tensors (move it with .cpu())");
  }
  if (tensor.is_sparse()) {
    throw std::invalid_argument(std::string(op) + ": sparse tensors are not supported");
  }
}

size_t bytesOf(const torch::Tensor& tensor) {
  return static_cast<size_t>(tensor.numel()) * tensor.element_size();
}

// std::invalid_argument unless `tensor` is contiguous with `elements` elements of `like`'s dtype.
void checkShapeOf(const char* op, const char* what, const torch::Tensor& tensor,
                  const torch::Tensor& like, int64_t elements) {
  checkBytes(op, tensor);
  if (!tensor.is_contiguous() || tensor.scalar_type() != like.scalar_type() ||
      tensor.numel() != elements) {
    throw std::invalid_argument(
        std::string(op) + ": " + what + " must be a contiguous tensor of " +
        std::to_string(elements) + " elements of " + c10::toString(like.scalar_type()) + ", got " +
        std::to_string(tensor.numel()) + " of " + c10::toString(tensor.scalar_type()) +
        (tensor.is_contiguous() ? "" : ", not contiguous"));
  }
}

comm::Buffer bufferOf(const torch::Tensor& contiguous, comm::DType dtype) {
  return {contiguous.data_ptr(), static_cast<size_t>(contiguous.numel()), dtype};
}

comm::ReduceOp commOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return comm::ReduceOp::kSum;
    case ReduceOp::kAvg:
      return comm::ReduceOp::kAvg;
    case ReduceOp::kMax:
      return comm::ReduceOp::kMax;
    case ReduceOp::kMin:
      return comm::ReduceOp::kMin;
    case ReduceOp::kProduct:
      return comm::ReduceOp::kProduct;
    case ReduceOp::kBand:
      return comm::ReduceOp::kBand;
    case ReduceOp::kBor:
      return comm::ReduceOp::kBor;
    case ReduceOp::kBxor:
      return comm::ReduceOp::kBxor;
  }
  throw std::invalid_argument("unknown ReduceOp " + std::to_string(static_cast<int>(op)));
}

// std::invalid_argument unless `reduction` can reduce `dtype` (the bitwise ops take integers).
void checkReduction(const char* op, comm::DType dtype, comm::ReduceOp reduction) {
  const std::string problem = comm::reduceProblem(dtype, reduction);
  if (!problem.empty()) throw std::invalid_argument(std::string(op) + ": " + problem);
}

// A per-call timeout: 0 means the group's (the communicator's default).
std::chrono::milliseconds callTimeout(const CollectiveOptions& options) {
  if (options.timeout_seconds == 0) return std::chrono::milliseconds(0);
  return timeoutOption(options.timeout_seconds, "timeout_seconds");
}

comm::OpOptions opOptions(const CollectiveOptions& options) {
  comm::OpOptions out;
  out.timeout = callTimeout(options);
  return out;
}

// Runs `run` on a contiguous view of `tensor`; a non-contiguous tensor goes through a contiguous
// copy whose result is copied back.
template <typename Fn>
void inPlace(torch::Tensor& tensor, Fn&& run) {
  if (tensor.is_contiguous()) {
    run(tensor);
    return;
  }
  torch::Tensor work = tensor.contiguous();
  run(work);
  torch::NoGradGuard no_grad;
  tensor.copy_(work);
}

}  // namespace

comm::AllreduceOptions ProcessGroup::Impl::allreduceCall(const CollectiveOptions& options) const {
  comm::AllreduceOptions call;
  call.op = commOp(options.op);
  call.algorithm = options.algorithm.value_or(algorithm);
  call.timeout = callTimeout(options);
  return call;
}

void ProcessGroup::Impl::checkRoot(const char* op, int root) const {
  if (root < 0 || root >= static_cast<int>(env.world_size)) {
    throw std::invalid_argument(std::string(op) + ": root " + std::to_string(root) +
                                " must be in [0, " + std::to_string(env.world_size) + ")");
  }
}

void ProcessGroup::allreduce(torch::Tensor& tensor, const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("allreduce", tensor);
  const comm::AllreduceOptions call = impl_->allreduceCall(options);
  checkReduction("allreduce", dtype, call.op);
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) return;  // one rank: the reduction is its own tensor
  inPlace(tensor, [&](torch::Tensor& t) {
    comm::Buffer buffer = bufferOf(t, dtype);
    communicator->allreduce(buffer, call);
  });
}

void ProcessGroup::broadcast(torch::Tensor& tensor, int root, const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("broadcast", tensor);
  impl_->checkRoot("broadcast", root);
  const comm::OpOptions call = opOptions(options);
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) return;
  inPlace(tensor, [&](torch::Tensor& t) {
    comm::Buffer buffer = bufferOf(t, dtype);
    communicator->broadcast(buffer, root, call);
  });
}

torch::Tensor ProcessGroup::allgather(const torch::Tensor& tensor,
                                      const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("allgather", tensor);
  const comm::OpOptions call = opOptions(options);
  std::vector<int64_t> shape{size()};
  for (int64_t d : tensor.sizes()) shape.push_back(d);
  torch::Tensor output = torch::empty(shape, tensor.options());
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) {
    output[0].copy_(tensor);
    return output;
  }
  const torch::Tensor input = tensor.contiguous();
  comm::Buffer out = bufferOf(output, dtype);
  communicator->allgather(bufferOf(input, dtype), out, call);
  return output;
}

torch::Tensor ProcessGroup::reduceScatter(const torch::Tensor& tensor,
                                          const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("reduceScatter", tensor);
  if (tensor.dim() == 0 || tensor.size(0) % size() != 0) {
    throw std::invalid_argument(
        "reduceScatter: the first dimension (" +
        (tensor.dim() == 0 ? std::string("none: a 0-dim tensor") : std::to_string(tensor.size(0))) +
        ") must be a multiple of the group's size " + std::to_string(size()));
  }
  const comm::ReduceOp op = commOp(options.op);
  checkReduction("reduceScatter", dtype, op);
  const comm::OpOptions call = opOptions(options);
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) return tensor.clone(at::MemoryFormat::Contiguous);
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[0] /= size();
  torch::Tensor output = torch::empty(shape, tensor.options());
  const torch::Tensor input = tensor.contiguous();
  comm::Buffer out = bufferOf(output, dtype);
  communicator->reduceScatter(bufferOf(input, dtype), out, op, call);
  return output;
}

void ProcessGroup::barrier(const CollectiveOptions& options) {
  const comm::OpOptions call = opOptions(options);
  if (comm::Communicator* communicator = impl_->communicator()) communicator->barrier(call);
}

void ProcessGroup::reduce(torch::Tensor& tensor, int root, const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("reduce", tensor);
  impl_->checkRoot("reduce", root);
  const comm::ReduceOp op = commOp(options.op);
  checkReduction("reduce", dtype, op);
  const comm::OpOptions call = opOptions(options);
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) return;
  if (rank() != root) {  // the tree leaves partial sums behind: reduce a copy
    torch::Tensor copy = tensor.contiguous().clone();
    comm::Buffer buffer = bufferOf(copy, dtype);
    communicator->reduce(buffer, root, op, call);
    return;
  }
  inPlace(tensor, [&](torch::Tensor& t) {
    comm::Buffer buffer = bufferOf(t, dtype);
    communicator->reduce(buffer, root, op, call);
  });
}

void ProcessGroup::gather(const torch::Tensor& input, torch::Tensor* output, int root,
                          const CollectiveOptions& options) {
  checkBytes("gather", input);
  impl_->checkRoot("gather", root);
  const bool mine = rank() == root;
  if (mine) {
    if (output == nullptr) throw std::invalid_argument("gather: the root needs an output tensor");
    checkShapeOf("gather", "the output", *output, input, input.numel() * size());
  }
  const comm::OpOptions call = opOptions(options);
  const torch::Tensor in = input.contiguous();
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) {
    if (bytesOf(in) > 0) std::memcpy(output->data_ptr(), in.data_ptr(), bytesOf(in));
    return;
  }
  communicator->gather(in.data_ptr(), bytesOf(in), mine ? output->data_ptr() : nullptr, root, call);
}

void ProcessGroup::scatter(const torch::Tensor* input, torch::Tensor& output, int root,
                           const CollectiveOptions& options) {
  checkBytes("scatter", output);
  impl_->checkRoot("scatter", root);
  const bool mine = rank() == root;
  if (mine) {
    if (input == nullptr) throw std::invalid_argument("scatter: the root needs an input tensor");
    checkShapeOf("scatter", "the input", *input, output, output.numel() * size());
  }
  const comm::OpOptions call = opOptions(options);
  comm::Communicator* communicator = impl_->communicator();
  inPlace(output, [&](torch::Tensor& out) {
    if (communicator == nullptr) {
      if (bytesOf(out) > 0) std::memcpy(out.data_ptr(), input->data_ptr(), bytesOf(out));
      return;
    }
    communicator->scatter(mine ? input->data_ptr() : nullptr, out.data_ptr(), bytesOf(out), root,
                          call);
  });
}

namespace {

// The bytes of each block when `tensor`'s first dimension is cut by `splits` (empty: `parts`
// equal blocks); std::invalid_argument naming `what` when the splits do not fit.
std::vector<size_t> blockBytes(const char* what, const torch::Tensor& tensor,
                               const std::vector<int64_t>& splits, int parts) {
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  const size_t rowBytes =
      rows == 0 ? 0 : static_cast<size_t>(tensor.numel() / rows) * tensor.element_size();
  std::vector<size_t> bytes;
  if (splits.empty()) {
    if (rows % parts != 0) {
      throw std::invalid_argument(std::string("allToAll: ") + what + "'s first dimension (" +
                                  std::to_string(rows) + ") is not a multiple of the group's " +
                                  std::to_string(parts) + " ranks; pass its splits");
    }
    return std::vector<size_t>(static_cast<size_t>(parts),
                               static_cast<size_t>(rows / parts) * rowBytes);
  }
  int64_t sum = 0;
  for (int64_t s : splits) {
    if (s < 0) throw std::invalid_argument(std::string("allToAll: ") + what + " split is negative");
    sum += s;
    bytes.push_back(static_cast<size_t>(s) * rowBytes);
  }
  if (static_cast<int>(splits.size()) != parts || sum != rows) {
    throw std::invalid_argument(
        std::string("allToAll: ") + what + " splits (" + std::to_string(splits.size()) +
        " of them, summing to " + std::to_string(sum) + ") must be one per rank (" +
        std::to_string(parts) + ") and sum to its first dimension (" + std::to_string(rows) + ")");
  }
  return bytes;
}

}  // namespace

void ProcessGroup::allToAll(const torch::Tensor& input, torch::Tensor& output,
                            const std::vector<int64_t>& input_splits,
                            const std::vector<int64_t>& output_splits,
                            const CollectiveOptions& options) {
  checkBytes("allToAll", input);
  checkBytes("allToAll", output);
  if (!output.is_contiguous() || output.scalar_type() != input.scalar_type()) {
    throw std::invalid_argument("allToAll: the output must be contiguous and of the input's dtype");
  }
  const std::vector<size_t> send = blockBytes("the input", input, input_splits, size());
  const std::vector<size_t> recv = blockBytes("the output", output, output_splits, size());
  const comm::OpOptions call = opOptions(options);
  const torch::Tensor in = input.contiguous();
  const auto self = static_cast<size_t>(rank());
  if (send[self] != recv[self]) {
    throw std::invalid_argument("allToAll: rank " + std::to_string(rank()) + " sends itself " +
                                std::to_string(send[self]) + " bytes but receives " +
                                std::to_string(recv[self]));
  }
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) {
    if (send[0] > 0) std::memcpy(output.data_ptr(), in.data_ptr(), send[0]);
    return;
  }
  communicator->allToAll(in.data_ptr(), send, output.data_ptr(), recv, call);
}

comm::Communicator& ProcessGroup::Impl::pointToPoint(const char* op, int peer, bool any) {
  const int world = static_cast<int>(env.world_size);
  std::string problem;
  if (world == 1) {
    problem = "a group of one has no peer";
  } else if (!options.point_to_point) {
    problem = "this group was made without point-to-point lanes (GroupOptions::point_to_point)";
  } else if (any && peer == kAnySource) {
    return *communicator();
  } else if (peer == static_cast<int>(env.rank)) {
    problem = "rank " + std::to_string(peer) + " is this rank itself";
  } else if (peer < 0 || peer >= world) {
    problem = "rank " + std::to_string(peer) + " is not in [0, " + std::to_string(world) + ")";
  } else {
    return *communicator();
  }
  throw std::invalid_argument(std::string(op) + ": " + problem);
}

// Work (<cumulus/process_group.h>): the communicator's Work, and the tensor it writes into.
struct Work::Impl {
  std::shared_ptr<comm::Work> work;  // null: nothing in flight (a group of one)
  torch::Tensor target;              // the caller's tensor
  torch::Tensor buffer;              // what the collective writes: `target`, or its contiguous copy
  torch::Tensor input;               // allgather: what it sends, kept alive until it is done
  std::shared_ptr<comm::ReceiveWork> receive;  // recvAsync's: who sent
  bool waited = false;
  std::exception_ptr error;
};

Work::Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Work::~Work() {
  if (impl_->waited) return;
  try {
    wait();
  } catch (const std::exception&) {
    // Documented: dropped here; the broken group reports it at its next call.
  }
}

void Work::wait() {
  if (!impl_->waited) {
    impl_->waited = true;
    if (impl_->work) {
      try {
        impl_->work->wait();
      } catch (...) {
        impl_->error = std::current_exception();
      }
    }
    if (!impl_->error && !impl_->buffer.is_same(impl_->target)) {
      torch::NoGradGuard no_grad;
      impl_->target.copy_(impl_->buffer);
    }
  }
  if (impl_->error) std::rethrow_exception(impl_->error);
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (!impl_->waited && impl_->work) {
    try {
      impl_->work->wait(timeout);
    } catch (...) {
      if (!impl_->work->isCompleted()) throw;  // still running: a timeout of this wait only
    }
  }
  wait();
}

bool Work::isCompleted() const { return impl_->work == nullptr || impl_->work->isCompleted(); }

int Work::source() const { return impl_->receive ? impl_->receive->source() : -1; }

namespace {

// A Work over `tensor`: `start` launches the collective on its contiguous buffer, unless the
// group is one rank.
template <typename Start>
std::unique_ptr<Work> startWork(torch::Tensor& tensor, comm::DType dtype,
                                comm::Communicator* communicator, Start&& start) {
  auto impl = std::make_unique<Work::Impl>();
  impl->target = tensor;
  impl->buffer = tensor;
  if (communicator != nullptr) {
    if (!tensor.is_contiguous()) impl->buffer = tensor.contiguous();
    comm::Buffer buffer = bufferOf(impl->buffer, dtype);
    impl->work = start(*communicator, buffer);
  }
  return std::make_unique<Work>(std::move(impl));
}

}  // namespace

std::unique_ptr<Work> ProcessGroup::allreduceAsync(torch::Tensor& tensor,
                                                   const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("allreduce", tensor);
  const comm::AllreduceOptions call = impl_->allreduceCall(options);
  checkReduction("allreduce", dtype, call.op);
  return startWork(
      tensor, dtype, impl_->communicator(),
      [&](comm::Communicator& c, comm::Buffer& b) { return c.allreduceAsync(b, call); });
}

std::unique_ptr<Work> ProcessGroup::broadcastAsync(torch::Tensor& tensor, int root,
                                                   const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("broadcast", tensor);
  impl_->checkRoot("broadcast", root);
  const comm::OpOptions call = opOptions(options);
  return startWork(
      tensor, dtype, impl_->communicator(),
      [&](comm::Communicator& c, comm::Buffer& b) { return c.broadcastAsync(b, root, call); });
}

std::unique_ptr<Work> ProcessGroup::allgatherAsync(const torch::Tensor& tensor,
                                                   torch::Tensor& output,
                                                   const CollectiveOptions& options) {
  const comm::DType dtype = checkTensor("allgather", tensor);
  std::vector<int64_t> shape{size()};
  for (int64_t d : tensor.sizes()) shape.push_back(d);
  if (output.scalar_type() != tensor.scalar_type() || output.sizes().vec() != shape ||
      !output.is_contiguous()) {
    throw std::invalid_argument(
        "allgatherAsync: the output must be a contiguous tensor of the "
        "input's dtype and of shape {size(), input's shape...}");
  }
  const comm::OpOptions call = opOptions(options);
  auto impl = std::make_unique<Work::Impl>();
  impl->target = output;
  impl->buffer = output;
  comm::Communicator* communicator = impl_->communicator();
  if (communicator == nullptr) {
    output[0].copy_(tensor);
    return std::make_unique<Work>(std::move(impl));
  }
  impl->input = tensor.contiguous();
  comm::Buffer out = bufferOf(impl->buffer, dtype);
  impl->work = communicator->allgatherAsync(bufferOf(impl->input, dtype), out, call);
  return std::make_unique<Work>(std::move(impl));
}

std::unique_ptr<Work> ProcessGroup::sendAsync(const torch::Tensor& tensor, int peer, int tag,
                                              const CollectiveOptions& options) {
  checkBytes("send", tensor);
  comm::Communicator& communicator = impl_->pointToPoint("send", peer, false);
  const comm::OpOptions call = opOptions(options);
  auto impl = std::make_unique<Work::Impl>();
  impl->input = tensor.contiguous();  // held until the send is done
  impl->work = communicator.send(impl->input.data_ptr(), bytesOf(impl->input), peer,
                                 static_cast<uint32_t>(tag), call);
  return std::make_unique<Work>(std::move(impl));
}

std::unique_ptr<Work> ProcessGroup::recvAsync(torch::Tensor& tensor, int source, int tag,
                                              const CollectiveOptions& options) {
  checkBytes("recv", tensor);
  comm::Communicator& communicator = impl_->pointToPoint("recv", source, true);
  const comm::OpOptions call = opOptions(options);
  auto impl = std::make_unique<Work::Impl>();
  impl->target = tensor;
  impl->buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  impl->receive = communicator.recv(impl->buffer.data_ptr(), bytesOf(impl->buffer), source,
                                    static_cast<uint32_t>(tag), call);
  impl->work = impl->receive;
  return std::make_unique<Work>(std::move(impl));
}

}  // namespace cumulus
