// Backend (python/backend.h): torch.distributed's "cumulus" c10d::Backend over
// cumulus::ProcessGroup.

#include "python/backend.h"

#include <ATen/core/ivalue.h>
#include <Python.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include "cumulus/process_group.h"
#include "python/backend_tensors.h"
#include "python/c10d_store.h"
#include "python/world_size_check.h"

namespace cumulus::python {
namespace {

// A collective's Work: completes c10d's Work (wait(), isCompleted(), exception()) and its Future,
// whose value is the output tensors, as DDP's reducer and comm hooks read it.
class CumulusWork final : public c10d::Work {
 public:
  CumulusWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type, title),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Called once, on the backend's thread, when the collective has finished or failed.
  void complete(const std::exception_ptr& error) {
    finish(error);
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

ReduceOp reduceOpOf(const char* op, const c10d::ReduceOp& reduce, const at::Tensor& tensor) {
  const bool boolean = tensor.scalar_type() == at::kBool;
  const bool complex = at::isComplexType(tensor.scalar_type());
  switch (reduce.op_) {
    case c10d::ReduceOp::SUM:
      return boolean ? ReduceOp::kMax : ReduceOp::kSum;  // a bool sum is a logical or
    case c10d::ReduceOp::AVG:
      if (boolean) refuse(std::string(op) + ": AVG of bool tensors is not defined");
      return ReduceOp::kAvg;
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      if (complex) refuse(std::string(op) + ": MIN and MAX of complex tensors are not defined");
      return reduce.op_ == c10d::ReduceOp::MIN ? ReduceOp::kMin : ReduceOp::kMax;
    case c10d::ReduceOp::PRODUCT:
      // The product of complex numbers is not taken part by part, as their transport is.
      if (complex) refuse(std::string(op) + ": PRODUCT of complex tensors is not supported");
      return ReduceOp::kProduct;  // bool: the product of 0s and 1s is the logical and
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      // Integers narrower than int32 travel sign-extended in int32: their low bits are the same.
      if (at::isFloatingType(tensor.scalar_type()) || complex) {
        refuse(std::string(op) + ": BAND, BOR and BXOR take integer and bool tensors, not " +
               c10::toString(tensor.scalar_type()));
      }
      return reduce.op_ == c10d::ReduceOp::BAND  ? ReduceOp::kBand
             : reduce.op_ == c10d::ReduceOp::BOR ? ReduceOp::kBor
                                                 : ReduceOp::kBxor;
    default:
      refuse(std::string(op) +
             ": reduce op not supported; the cumulus backend reduces with SUM, AVG, MIN, MAX, "
             "PRODUCT, BAND, BOR and BXOR");
  }
}

// A call's own timeout, or else the group's: always set, since the Cumulus group underneath was
// made with what was left of init's deadline (its rendezvous), not with the group's timeout.
CollectiveOptions callTimeout(std::chrono::milliseconds timeout, std::chrono::milliseconds group) {
  CollectiveOptions options;
  options.timeout_seconds =
      (timeout > std::chrono::milliseconds(0) ? timeout : group).count() / 1000.0;
  return options;
}

// This rank's place in the group, from torch's rank and size and this process's environment
// (GroupMember::fromEnvironment: neither RANK, WORLD_SIZE nor LOCAL_* is read, so a subgroup's
// rank is torch's and env:// needs nothing more than it documents).
GroupMember memberOf(int rank, int size) {
  try {
    return GroupMember::fromEnvironment(rank, size);
  } catch (const GroupError& e) {
    throw GroupError(std::string("cumulus backend: ") + e.what());
  }
}

}  // namespace

class Backend::Queue {
 public:
  Queue() : thread_([this] { loop(); }) {}
  ~Queue() { stop(); }

  // Runs what is queued, then ends the thread. Idempotent; later pushes throw.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    std::lock_guard<std::mutex> joining(join_mutex_);
    if (thread_.joinable()) thread_.join();
  }

  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) {
        throw std::runtime_error(
            "cumulus backend: the process is exiting (its collectives were stopped at "
            "interpreter exit); no collective runs after that");
      }
      tasks_.push_back(std::move(task));
    }
    wake_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::mutex join_mutex_;  // one stop() joins; a concurrent one waits for it
  std::thread thread_;     // last: starts after the fields it reads
};

namespace {

// The live backends, for stopAllBackends().
std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<Backend*>& registry() {
  static std::set<Backend*> backends;
  return backends;
}

}  // namespace

void stopAllBackends() {
  std::lock_guard<std::mutex> lock(registryMutex());
  for (Backend* backend : registry()) backend->stopQueue();
}

void Backend::stopQueue() {
  // The queue's thread may need the GIL to free a task's last reference to a tensor that Python
  // made (its PyObject goes with it), while the thread that stops the queue holds it: pybind's
  // deallocation of the backend (destroy_process_group) and atexit do. So the join runs without
  // it, or each would wait for the other for ever.
  // The live status goes last, once nothing more runs (its publisher flushes to the Store).
  const auto stop = [this] {
    queue_->stop();
    comm_metrics_.reset();
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState* saved = PyEval_SaveThread();
    stop();
    PyEval_RestoreThread(saved);
    return;
  }
  stop();
}

CollectiveOptions Backend::callOptions(std::chrono::milliseconds timeout) const {
  return callTimeout(timeout, timeout_);
}

Backend::Backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                 std::chrono::milliseconds timeout, std::chrono::milliseconds init_timeout,
                 const BackendOptions& options)
    : c10d::Backend(rank, size), options_(options), timeout_(timeout) {
  // One deadline for the whole rendezvous: the world-size check and the connections share it.
  const auto deadline = std::chrono::steady_clock::now() + init_timeout;
  const GroupMember member = memberOf(rank, size);
  store_ = std::make_unique<C10dStore>(store);
  checkWorldSize(*store_, member, deadline, timeout);
  GroupOptions group;
  group.algorithm = options.algorithm;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  group.timeout_seconds = std::max<int64_t>(left.count(), 1) / 1000.0;
  group.cost_model = options.cost_model;
  group_ = ProcessGroup::overStore(*store_, member, group);
  if (size > 1) comm_metrics_ = std::make_unique<CommMetrics>(*group_);
  queue_ = std::make_unique<Queue>();
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().insert(this);
}

Backend::~Backend() {
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    registry().erase(this);
  }
  stopQueue();
  queue_.reset();
}

c10::intrusive_ptr<c10d::Work> Backend::enqueue(c10d::OpType type, const char* name,
                                                std::vector<at::Tensor> outputs,
                                                std::function<void()> run) {
  auto work = c10::make_intrusive<CumulusWork>(rank_, type, name, std::move(outputs));
  ++collectives_;
  queue_->push([work, run = std::move(run), metrics = comm_metrics_.get()] {
    std::exception_ptr error;
    try {
      run();
    } catch (...) {
      error = std::current_exception();
    }
    work->complete(error);
    if (metrics != nullptr) metrics->update();
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  at::Tensor tensor = theOne("broadcast", tensors);
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_) {
    refuse("broadcast: root " + std::to_string(root) + " must be in [0, " + std::to_string(size_) +
           ")");
  }
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::BROADCAST, "cumulus:broadcast", tensors, [=, this] {
    Wire wire = wireOf(tensor);
    group_->broadcast(wire.tensor, root, call);
    wire.restore();
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse() &&
      tensors[0].device().is_cpu()) {
    at::Tensor tensor = tensors[0];
    if (opts.reduceOp != c10d::ReduceOp::SUM) {
      refuse("all_reduce: sparse tensors are reduced with SUM only");
    }
    if (tensor.scalar_type() != at::kFloat && tensor.scalar_type() != at::kDouble &&
        tensor.scalar_type() != at::kLong && tensor.scalar_type() != at::kInt) {
      refuse(std::string("all_reduce: sparse tensors of dtype ") +
             c10::toString(tensor.scalar_type()) +
             " are not supported (float32, float64, int32, "
             "int64 are)");
    }
    const CollectiveOptions call = callOptions(opts.timeout);
    return enqueue(c10d::OpType::ALLREDUCE, "cumulus:all_reduce", tensors,
                   [=, this] { sparseAllreduce(*group_, tensor, call); });
  }
  at::Tensor tensor = theOne("all_reduce", tensors);
  CollectiveOptions call = callOptions(opts.timeout);
  call.op = reduceOpOf("all_reduce", opts.reduceOp, tensor);
  const bool compress = options_.compression == Compression::kBf16 &&
                        tensor.scalar_type() == at::kFloat &&
                        (call.op == ReduceOp::kSum || call.op == ReduceOp::kAvg);
  return enqueue(c10d::OpType::ALLREDUCE, "cumulus:all_reduce", tensors, [=, this] {
    if (compress) {
      at::Tensor half = tensor.to(at::kBFloat16);
      group_->allreduce(half, call);
      writeInto(tensor, half);
      return;
    }
    Wire wire = wireOf(tensor);
    group_->allreduce(wire.tensor, call);
    wire.restore();
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) refuse("all_reduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) {
    checkTensor("all_reduce_coalesced", t);
    if (t.scalar_type() != tensors[0].scalar_type()) {
      refuse("all_reduce_coalesced: the tensors must share one dtype, got " +
             std::string(c10::toString(tensors[0].scalar_type())) + " and " +
             c10::toString(t.scalar_type()));
    }
  }
  CollectiveOptions call = callOptions(opts.timeout);
  call.op = reduceOpOf("all_reduce_coalesced", opts.reduceOp, tensors[0]);
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "cumulus:all_reduce_coalesced", tensors,
                 [=, this] {
                   std::vector<at::Tensor> flat;
                   for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
                   Wire wire = wireOf(at::cat(flat));
                   group_->allreduce(wire.tensor, call);
                   at::Tensor result = wire.original.defined()
                                           ? (wire.boolean ? wire.tensor.ne(0) : wire.tensor)
                                           : wire.tensor;
                   int64_t offset = 0;
                   for (const at::Tensor& t : tensors) {
                     writeInto(t, result.narrow(0, offset, t.numel()));
                     offset += t.numel();
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOptions& opts) {
  at::Tensor tensor = theOne("reduce", tensors);
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_) {
    refuse("reduce: root " + std::to_string(root) + " must be in [0, " + std::to_string(size_) +
           ")");
  }
  CollectiveOptions call = callOptions(opts.timeout);
  call.op = reduceOpOf("reduce", opts.reduceOp, tensor);
  const bool mine = rank_ == root;
  // A tree reduce; the ranks other than the root keep their tensor (the group reduces a copy).
  return enqueue(c10d::OpType::REDUCE, "cumulus:reduce", tensors, [=, this] {
    Wire wire = wireOf(tensor);
    group_->reduce(wire.tensor, root, call);
    if (mine) wire.restore();
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  at::Tensor input = theOne("all_gather", inputs);
  if (outputs.size() != 1) {
    refuse("all_gather: takes one output list per call, got " + std::to_string(outputs.size()));
  }
  checkList("all_gather", outputs[0], size_, input, "the output list");
  std::vector<at::Tensor> out = outputs[0];
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::ALLGATHER, "cumulus:all_gather", out, [=, this] {
    const at::Tensor rows = group_->allgather(wireOf(input).tensor, call);
    for (int r = 0; r < size_; ++r) writeInto(out[r], rows[r]);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  checkTensor("all_gather_into_tensor", input);
  checkTensor("all_gather_into_tensor", output);
  if (output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    refuse("all_gather_into_tensor: the output must hold " + std::to_string(size_) + " × " +
           std::to_string(input.numel()) + " elements of the input's dtype, got " +
           std::to_string(output.numel()) + " of " + c10::toString(output.scalar_type()));
  }
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "cumulus:all_gather_into_tensor", {output},
                 [=, this] { writeInto(output, group_->allgather(wireOf(input).tensor, call)); });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (outputs.size() != static_cast<size_t>(size_)) {
    refuse("all_gather_coalesced: " + std::to_string(outputs.size()) +
           " output lists; the group has " + std::to_string(size_) + " ranks");
  }
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor("all_gather_coalesced", inputs[i]);
    for (int r = 0; r < size_; ++r) {
      if (outputs[r].size() != inputs.size()) {
        refuse("all_gather_coalesced: output list " + std::to_string(r) + " has " +
               std::to_string(outputs[r].size()) + " tensors, the input list " +
               std::to_string(inputs.size()));
      }
      all.push_back(outputs[r][i]);
    }
  }
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, "cumulus:all_gather_coalesced", all, [=, this] {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor rows = group_->allgather(wireOf(inputs[i]).tensor, call);
      for (int r = 0; r < size_; ++r) writeInto(outputs[r][i], rows[r]);
    }
  });
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::GatherOptions& opts) {
  at::Tensor input = theOne("gather", inputs, checkMovable);
  const int root = static_cast<int>(opts.rootRank);
  checkRoot("gather", root, size_);
  const bool mine = rank_ == root;
  std::vector<at::Tensor> out;
  if (mine) {
    if (outputs.size() != 1) refuse("gather: the root takes one output list");
    checkList("gather", outputs[0], size_, input, "the output list", checkMovable);
    out = outputs[0];
  } else if (!outputs.empty()) {
    refuse("gather: only the root (rank " + std::to_string(root) + ") passes an output list");
  }
  const CollectiveOptions call = callOptions(opts.timeout);
  // Each rank's bytes go straight to the root, which lays them side by side.
  return enqueue(c10d::OpType::GATHER, "cumulus:gather", out, [=, this] {
    if (!mine) return group_->gather(input, nullptr, root, call);
    at::Tensor blocks = at::empty({size_ * input.numel()}, input.options());
    group_->gather(input, &blocks, root, call);
    unflatten(blocks, out);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  at::Tensor output = theOne("scatter", outputs, checkMovable);
  const int root = static_cast<int>(opts.rootRank);
  checkRoot("scatter", root, size_);
  const bool mine = rank_ == root;
  std::vector<at::Tensor> in;
  if (mine) {
    if (inputs.size() != 1) refuse("scatter: the root takes one input list");
    checkList("scatter", inputs[0], size_, output, "the input list", checkMovable);
    in = inputs[0];
  } else if (!inputs.empty()) {
    refuse("scatter: only the root (rank " + std::to_string(root) + ") passes an input list");
  }
  const CollectiveOptions call = callOptions(opts.timeout);
  // The root sends each rank its block, and only its block.
  return enqueue(c10d::OpType::SCATTER, "cumulus:scatter", {output}, [=, this] {
    at::Tensor target = output;
    if (!mine) return group_->scatter(nullptr, target, root, call);
    const at::Tensor blocks = flatCat(in);
    group_->scatter(&blocks, target, root, call);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  at::Tensor output = theOne("reduce_scatter", outputs);
  if (inputs.size() != 1) refuse("reduce_scatter: takes one input list per call");
  checkList("reduce_scatter", inputs[0], size_, output, "the input list");
  std::vector<at::Tensor> in = inputs[0];
  CollectiveOptions call = callOptions(opts.timeout);
  call.op = reduceOpOf("reduce_scatter", opts.reduceOp, output);
  return enqueue(c10d::OpType::REDUCE_SCATTER, "cumulus:reduce_scatter", {output}, [=, this] {
    std::vector<at::Tensor> rows;
    for (const at::Tensor& t : in) rows.push_back(t.reshape({1, -1}));
    Wire wire = wireOf(at::cat(rows));
    at::Tensor mine = group_->reduceScatter(wire.tensor, call);
    writeInto(output, wire.boolean ? mine.ne(0) : mine);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor("reduce_scatter_tensor", output);
  checkTensor("reduce_scatter_tensor", input);
  if (input.numel() != output.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    refuse("reduce_scatter_tensor: the input must hold " + std::to_string(size_) + " × " +
           std::to_string(output.numel()) + " elements of the output's dtype, got " +
           std::to_string(input.numel()) + " of " + c10::toString(input.scalar_type()));
  }
  CollectiveOptions call = callOptions(opts.timeout);
  call.op = reduceOpOf("reduce_scatter_tensor", opts.reduceOp, output);
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "cumulus:reduce_scatter_tensor", {output},
                 [=, this] {
                   Wire wire = wireOf(input.reshape({size_, -1}));
                   at::Tensor mine = group_->reduceScatter(wire.tensor, call);
                   writeInto(output, wire.boolean ? mine.ne(0) : mine);
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::BARRIER, "cumulus:barrier", {},
                 [=, this] { group_->barrier(call); });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& outputSplitSizes,
                                                      std::vector<int64_t>& inputSplitSizes,
                                                      const c10d::AllToAllOptions& opts) {
  checkMovable("all_to_all_single", input);
  checkMovable("all_to_all_single", output);
  if (output.scalar_type() != input.scalar_type()) {
    refuse("all_to_all_single: the output's dtype " +
           std::string(c10::toString(output.scalar_type())) + " is not the input's " +
           c10::toString(input.scalar_type()));
  }
  checkSplits("all_to_all_single", "input", input, inputSplitSizes, size_);
  checkSplits("all_to_all_single", "output", output, outputSplitSizes, size_);
  const std::vector<int64_t> outSplits = outputSplitSizes, inSplits = inputSplitSizes;
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::ALLTOALL_BASE, "cumulus:all_to_all_single", {output}, [=, this] {
    at::Tensor target = output.is_contiguous() ? output : output.contiguous();
    group_->allToAll(input, target, inSplits, outSplits, call);
    if (!target.is_same(output)) writeInto(output, target);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
    refuse("all_to_all: " + std::to_string(inputs.size()) + " input and " +
           std::to_string(outputs.size()) + " output tensors; the group has " +
           std::to_string(size_) + " ranks");
  }
  std::vector<int64_t> inSplits, outSplits;
  for (int r = 0; r < size_; ++r) {
    checkMovable("all_to_all", inputs[r]);
    checkMovable("all_to_all", outputs[r]);
    if (inputs[r].scalar_type() != inputs[0].scalar_type() ||
        outputs[r].scalar_type() != inputs[0].scalar_type()) {
      refuse("all_to_all: every tensor must have one dtype");
    }
    inSplits.push_back(inputs[r].numel());
    outSplits.push_back(outputs[r].numel());
  }
  const std::vector<at::Tensor> in = inputs, out = outputs;
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::ALLTOALL, "cumulus:all_to_all", out, [=, this] {
    int64_t total = 0;
    for (int64_t n : outSplits) total += n;
    at::Tensor received = at::empty({total}, in[0].options());
    group_->allToAll(flatCat(in), received, inSplits, outSplits, call);
    unflatten(received, out);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (outputs.size() != inputs.size()) {
    refuse("all_gather_into_tensor_coalesced: " + std::to_string(outputs.size()) + " outputs for " +
           std::to_string(inputs.size()) + " inputs");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor("all_gather_into_tensor_coalesced", inputs[i]);
    checkTensor("all_gather_into_tensor_coalesced", outputs[i]);
    if (outputs[i].numel() != inputs[i].numel() * size_ ||
        outputs[i].scalar_type() != inputs[i].scalar_type()) {
      refuse("all_gather_into_tensor_coalesced: output " + std::to_string(i) + " must hold " +
             std::to_string(size_) + " × its input's elements of its dtype");
    }
  }
  const std::vector<at::Tensor> in = inputs, out = outputs;
  const CollectiveOptions call = callOptions(opts.timeout);
  return enqueue(c10d::OpType::COALESCED, "cumulus:all_gather_into_tensor_coalesced", out,
                 [=, this] {
                   for (size_t i = 0; i < in.size(); ++i) {
                     writeInto(out[i], group_->allgather(wireOf(in[i]).tensor, call));
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() != inputs.size() || inputs.empty()) {
    refuse("reduce_scatter_tensor_coalesced: " + std::to_string(outputs.size()) + " outputs for " +
           std::to_string(inputs.size()) + " inputs");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor("reduce_scatter_tensor_coalesced", inputs[i]);
    checkTensor("reduce_scatter_tensor_coalesced", outputs[i]);
    if (inputs[i].numel() != outputs[i].numel() * size_ ||
        outputs[i].scalar_type() != inputs[i].scalar_type()) {
      refuse("reduce_scatter_tensor_coalesced: input " + std::to_string(i) + " must hold " +
             std::to_string(size_) + " × its output's elements of its dtype");
    }
  }
  CollectiveOptions call = callOptions(opts.timeout);
  call.op = reduceOpOf("reduce_scatter_tensor_coalesced", opts.reduceOp, outputs[0]);
  const std::vector<at::Tensor> in = inputs, out = outputs;
  return enqueue(c10d::OpType::COALESCED, "cumulus:reduce_scatter_tensor_coalesced", out,
                 [=, this] {
                   for (size_t i = 0; i < in.size(); ++i) {
                     Wire wire = wireOf(in[i].reshape({size_, -1}));
                     at::Tensor mine = group_->reduceScatter(wire.tensor, call);
                     writeInto(out[i], wire.boolean ? mine.ne(0) : mine);
                   }
                 });
}

}  // namespace cumulus::python
