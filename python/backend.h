#pragma once
// The c10d Backend behind torch.distributed's backend "cumulus" (docs/python.md).
//
// `import cumulus` registers it; `torch.distributed.init_process_group("cumulus")` then builds one
// over the store torch made for the group (python/c10d_store.h) and Cumulus's collectives run
// underneath every torch.distributed call and DistributedDataParallel's reducer.
//
// Every collective is queued and run in call order on the backend's one worker thread, so each
// returns a Work at once (async_op=True) and DDP overlaps its buckets with the backward pass. The
// Work completes its Future with the output tensors, as DDP's comm hooks expect. A failure (a dead
// peer, a timeout, a wrong job token) completes the Work with Cumulus's CommError, whose text
// names the operation and the peer; the group is broken from then on and every later call fails
// at once with the same cause, never hangs.
//
// Tensors: CPU, one per call (one device per process). What only moves bytes (send, recv,
// gather, scatter, all_to_all) takes every dtype as it is; what reduces, broadcasts or all-gathers
// sends float32, float64, bfloat16, float16, int32 and int64 as they are, uint8, int8, int16 and
// bool through int32 (bool sums are logical or), complex through its real view. Reductions: sum,
// avg, min, max, product, band, bor, bxor (PREMUL_SUM is refused with std::invalid_argument, as
// are a tensor on another device and mismatched list lengths, when the call is made).
//
// Bytes moved: reduce is a binomial tree (each rank's bytes sent once), gather and scatter go
// straight between the root and each rank, all_to_all is a pairwise exchange.
//
// Thread-safety: the methods may be called from any thread; the cross-rank order of collectives
// is the order in which they are called, as in every c10d backend.

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "cumulus/options.h"
#include "cumulus/process_group.h"
#include "cumulus/recorder.h"

namespace cumulus::python {

class C10dStore;

struct BackendOptions {
  Algorithm algorithm = Algorithm::kAuto;  // every allreduce's
  // kBf16: float32 all-reduces travel as bfloat16 (half the bytes; no error feedback, like
  // torch's bf16_compress_hook). Other dtypes and ops are unaffected.
  Compression compression = Compression::kNone;
  std::string cost_model;  // a `cumulus-bench calibrate` file; empty: the built-in model
};

// A c10d::Backend, torch 2.x's unit of a process group: torch wraps it in its ProcessGroup for the
// CPU device (cumulus/__init__.py registers it with devices=["cpu"]).
class Backend final : public c10d::Backend {
 public:
  // Joins the group of `size` ranks through `store`, blocking until every rank is connected or
  // `init_timeout` passes (CommError naming the ranks that never joined): what is left of
  // init_process_group's timeout once torch's own store is up (cumulus/__init__.py). First every
  // rank checks that the others were started with its world size (python/world_size_check.h,
  // GroupError naming both). `timeout` is each collective's that gives none. The job token,
  // generation and bind address come from the environment as for any Cumulus worker
  // (CUMULUS_JOB_TOKEN, CUMULUS_GENERATION, CUMULUS_BIND_HOST; without the last, the address that
  // routes to MASTER_ADDR).
  Backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
          std::chrono::milliseconds timeout, std::chrono::milliseconds init_timeout,
          const BackendOptions& options);
  ~Backend() override;

  const std::string getBackendName() const override { return "cumulus"; }
  const BackendOptions& backendOptions() const { return options_; }
  // Runs the queued collectives, then stops the thread and sends the last live status; later
  // calls throw. See stopAllBackends.
  void stopQueue();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Gloo's monitored barrier (torch.distributed.monitored_barrier): every rank reports to rank 0
  // within opts.timeout, then rank 0 releases them; rank 0 raises CommError naming the first rank
  // that did not come ("Rank 1 failed to pass monitoredBarrier in 100 ms"), or with waitAllRanks
  // every one ("Ranks 1, 2 failed ..."), and the others raise that rank 0 did not release them.
  // Blocking, on point-to-point lanes, apart from the collectives' order.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  // The collectives this rank has issued on the group so far: the same on every rank while
  // they are in step (torch reads it for subgroups' collectives and for desync reports).
  uint64_t getSequenceNumberForGroup() override { return collectives_.load(); }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;

  // Point-to-point: posted at once on the group's point-to-point lanes, not queued behind the
  // collectives (a receive may wait for a peer that first runs collectives of its own). Matched
  // by tag, in the order of the sends (MPI's rules); the Work's sourceRank() names the sender.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  class Queue;
  // A collective's options: its own timeout, else the group's.
  CollectiveOptions callOptions(std::chrono::milliseconds timeout) const;
  // Queues `run` (which fills `outputs`) and returns its Work.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name,
                                         std::vector<at::Tensor> outputs,
                                         std::function<void()> run);

  BackendOptions options_;
  std::chrono::milliseconds timeout_;             // a collective's, when it gives none
  std::unique_ptr<C10dStore> store_;              // outlives group_
  std::unique_ptr<cumulus::ProcessGroup> group_;  // Cumulus's group of these ranks
  // The group's collectives at cumulus-run's live endpoint (--metrics-port), from the queue's
  // thread after each one; null in a group of one. Stopped after the queue, before the group.
  std::unique_ptr<cumulus::CommMetrics> comm_metrics_;
  std::unique_ptr<Queue> queue_;                 // stopped first
  std::atomic<uint64_t> monitored_barriers_{0};  // monitoredBarrier calls, for their tags
  std::atomic<uint64_t> collectives_{0};         // enqueue()d so far
};

// Stops every live backend's thread after what it has queued (Python's atexit, through
// cumulus/__init__.py): the threads end before the interpreter and the C++ runtime tear down
// what they use, whether or not the program destroyed its groups.
void stopAllBackends();

}  // namespace cumulus::python
