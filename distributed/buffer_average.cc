#include "distributed/buffer_average.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "distributed/distributed_sync.h"

namespace cumulus::distributed {

BufferAverage::BufferAverage(const std::vector<torch::Tensor>& buffers) {
  for (const torch::Tensor& b : buffers) {
    try {
      commDType(b.scalar_type());
    } catch (const std::invalid_argument&) {
      continue;  // not a statistic to average
    }
    auto same = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return g.tensors.front().scalar_type() == b.scalar_type();
    });
    if (same == groups_.end()) same = groups_.emplace(groups_.end());
    same->tensors.push_back(b);
  }
  for (Group& g : groups_) {
    int64_t total = 0;
    for (const torch::Tensor& t : g.tensors) total += t.numel();
    g.flat = torch::zeros({total}, g.tensors.front().options());
  }
}

void BufferAverage::launch(comm::Communicator& comm, Algorithm algorithm,
                           std::chrono::milliseconds timeout, std::exception_ptr& error) {
  comm::AllreduceOptions op;
  op.op = comm::ReduceOp::kSum;
  op.algorithm = algorithm;
  op.timeout = timeout;
  for (Group& g : groups_) {
    {
      torch::NoGradGuard no_grad;
      int64_t at = 0;
      for (const torch::Tensor& t : g.tensors) {
        g.flat.narrow(0, at, t.numel()).copy_(t.reshape(-1));
        at += t.numel();
      }
    }
    comm::Buffer buffer{g.flat.data_ptr(), static_cast<size_t>(g.flat.numel()),
                        commDType(g.flat.scalar_type())};
    try {
      g.work = comm.allreduceAsync(buffer, op);
    } catch (...) {
      if (!error) error = std::current_exception();
      return;
    }
  }
}

void BufferAverage::land(std::chrono::milliseconds wait, int64_t world, std::exception_ptr& error) {
  for (Group& g : groups_) {
    if (!g.work) continue;
    try {
      g.work->wait(wait);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    g.work.reset();
  }
  if (error) return;
  torch::NoGradGuard no_grad;
  for (Group& g : groups_) {
    const torch::Tensor average = g.flat.is_floating_point()
                                      ? g.flat.div(static_cast<double>(world))
                                      : g.flat.div(world, "floor");
    int64_t at = 0;
    for (torch::Tensor& t : g.tensors) {
      t.copy_(average.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
  }
}

}  // namespace cumulus::distributed
