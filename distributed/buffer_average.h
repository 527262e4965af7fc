#pragma once
// BufferAverage: the model's buffers (batch norm's running statistics) made the same on every rank
// of a communicator, for DistributedGradientSync::attachBuffers (distributed_sync.h). One group per
// dtype the reductions take, each summed in a flat tensor of its own: launch() copies the buffers
// in and starts one all-reduce per group; land() waits for them and writes back the average
// (integer buffers floored). Every rank holds the same sum, so every rank writes the same bits.
// Buffers of another dtype (bool, uint8, complex: masks and constants) are left out.
//
// Not thread-safe: its owner calls it under its own lock.

#include <torch/types.h>

#include <chrono>
#include <exception>
#include <memory>
#include <vector>

#include "comm/algorithm.h"
#include "comm/communicator.h"
#include "comm/work.h"

namespace cumulus::distributed {

class BufferAverage {
 public:
  // `buffers`: every rank passes the same shapes and dtypes (the caller checked).
  explicit BufferAverage(const std::vector<torch::Tensor>& buffers);

  // Copies the buffers in and starts their all-reduces (SUM) on `comm`; a communicator that
  // refuses sets `error` and launches nothing more.
  void launch(comm::Communicator& comm, Algorithm algorithm, std::chrono::milliseconds timeout,
              std::exception_ptr& error);
  // Waits for what launch() started (each up to `wait`), then, unless `error` is set (by a wait
  // here or before), writes each buffer's average over `world` ranks back.
  void land(std::chrono::milliseconds wait, int64_t world, std::exception_ptr& error);

 private:
  struct Group {
    std::vector<torch::Tensor> tensors;
    torch::Tensor flat;
    std::shared_ptr<comm::Work> work;  // this step's, once launched
  };
  std::vector<Group> groups_;
};

}  // namespace cumulus::distributed
