#pragma once
// <cumulus/process_group.h>: this process's membership in the job, and the collectives on tensors.
//
// A program started by cumulus-run (or by hand with the same variables) finds its group in the
// torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// plus CUMULUS_RUN_ID, CUMULUS_GENERATION, CUMULUS_RESTART_COUNT, CUMULUS_JOB_TOKEN and, for the
// funnel algorithm, CUMULUS_PS_ENDPOINT. Without WORLD_SIZE (or with WORLD_SIZE=1) it is a group of
// one: no Store, no sockets, and every collective returns at once with the one rank's data.
//
//   auto group = cumulus::ProcessGroup::fromEnvironment();   // blocks for the rendezvous
//   torch::Tensor t = torch::ones({4});
//   group->allreduce(t);                                      // t == world size, on every rank
//
// Collectives: every rank calls them in the same order with matching arguments (same shape and
// dtype; same root; same op). Tensors are CPU tensors of float32, float64, bfloat16, float16, int32
// or int64 (gather, scatter, allToAll, sendAsync and recvAsync, which only move bytes, take any
// dtype); a non-contiguous one is reduced through a contiguous copy and written back. They block
// until done, or throw CommError naming the operation, its sequence number and the peer within
// `timeout_seconds` when a peer dies, hangs or lies. After a CommError the group is broken: every
// later call throws at once. Build a new group (a new generation, which cumulus-run starts) to go
// on. For a fixed algorithm and world size the order of summation is fixed, so results are
// bit-identical from run to run.
//
// Thread-safety: all methods may be called from any thread; concurrent collectives are
// serialized, and the cross-rank order is the caller's job.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cumulus/errors.h"
#include "cumulus/options.h"

// torch::Tensor, declared only: a program that joins a group without touching tensors (a launcher
// tool, cumulus-train's main) does not compile LibTorch's headers. Callers of the collectives
// include <torch/torch.h> (or <torch/types.h>) themselves.
namespace at {
class Tensor;
}
namespace torch {
using at::Tensor;
}

namespace cumulus {

// kProduct multiplies (integers wrap around); kBand, kBor and kBxor are bitwise and, or and
// exclusive or, and take int32 and int64 tensors only (std::invalid_argument otherwise).
enum class ReduceOp { kSum, kAvg, kMax, kMin, kProduct, kBand, kBor, kBxor };

struct GroupOptions {
  // The default algorithm of allreduce (<cumulus/options.h>): kFunnel (through cumulus-run's
  // parameter server), kTree, kRing, kHierarchical (ring inside each host, ring across hosts) or
  // kAuto (the cost model's pick for the size, world and hosts). From a name: parseAlgorithm().
  Algorithm algorithm = Algorithm::kAuto;
  // The deadline of the rendezvous and of every collective, in seconds (> 0).
  double timeout_seconds = kDefaultTimeoutSeconds;
  // A calibration file written by `cumulus-bench calibrate`; empty: the built-in cost model.
  std::string cost_model;
  // Sends and receives (ProcessGroup::sendAsync, recvAsync) need a second connection to each peer,
  // opened at the rendezvous, and a thread that reads them; false saves both in a group that never
  // uses them. Every rank of a group must agree.
  bool point_to_point = true;
};

class Store;  // <cumulus/store.h>

// This process's place in a group that ProcessGroup::overStore builds over a Store.
struct GroupMember {
  int rank = 0;  // in [0, size)
  int size = 1;
  // The rendezvous's keys in the store are under this generation: two groups over one store (a
  // regroup, a second torch.distributed group) take different ones and never meet each other's
  // ranks.
  uint64_t generation = 0;
  // The job's shared secret: every connection between two ranks proves that both hold it. Empty:
  // none (any process that reaches the listener and the store may join).
  std::string job_token;
  // The address this rank listens on for its peers; empty: 127.0.0.1 (ranks of one host).
  std::string bind_host;
  // HOST:PORT of a parameter server (cumulus-ps) for Algorithm::kFunnel; empty: none.
  std::string parameter_server;

  // `rank` of `size`, the rest from this process's environment as cumulus-run, torchrun and Slurm
  // leave it: CUMULUS_GENERATION, CUMULUS_JOB_TOKEN, CUMULUS_PS_ENDPOINT, and CUMULUS_BIND_HOST,
  // else (for a group of several) the address of this host that routes to MASTER_ADDR (or to
  // CUMULUS_STORE's host). RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE are not read: a
  // subgroup's rank is not the job's, and which ranks share a host is found out in the rendezvous.
  // Throws GroupError naming a malformed variable or a rank out of range.
  static GroupMember fromEnvironment(int rank, int size);
};

// Per-call choices; the defaults are the group's.
struct CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
  std::optional<Algorithm> algorithm;  // allreduce only; unset: GroupOptions::algorithm
  double timeout_seconds = 0;          // 0: GroupOptions::timeout_seconds
};

// What one kind of collective cost this rank (ProcessGroup::collectiveStats).
struct CollectiveStats {
  std::string op;
  uint64_t count = 0;
  double seconds = 0;
  uint64_t bytes_sent = 0;
};

// A collective in flight (ProcessGroup::allreduceAsync, broadcastAsync), as c10d's Work. It holds
// the tensor, so the memory stays alive; the program must neither read nor write the tensor until
// wait() returns. Queued collectives run in call order on the group's background thread, before
// any later blocking collective, so the cross-rank order is still the order of the calls.
// Thread-safety: one thread waits; isCompleted() may be called from any thread.
class Work {
 public:
  // Waits for the collective if no wait() did (it writes into the tensor); an error that no wait()
  // surfaced is dropped here, and the group's next call reports it.
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective is done, bounded by its timeout, then leaves the result in the
  // tensor (a non-contiguous tensor gets it copied back here). Throws its CommError if it failed.
  // A second call returns at once (or throws the same error).
  void wait();
  // The same, giving up after `timeout`: throws CommError(kTimeout) if the operation is still
  // running then. It keeps running (bounded by its own timeout), and a later wait() may still
  // return its result.
  void wait(std::chrono::milliseconds timeout);
  // True once the collective finished, successfully or not. Never blocks.
  bool isCompleted() const;
  // A receive's (recvAsync) sender once wait() returned; before that, the rank asked for
  // (kAnySource: any). -1 for every other Work.
  int source() const;

  struct Impl;
  explicit Work(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

class ProcessGroup {
 public:
  // recvAsync's source for "whichever rank sends first".
  static constexpr int kAnySource = -1;

  // Joins the group the environment describes and blocks until every rank is connected (or
  // options.timeout_seconds pass). Throws GroupError naming a missing or malformed variable
  // ("RANK=3 must be in [0, WORLD_SIZE=2)") or option ("algorithm: unknown 'rng'; did you mean
  // 'ring'?"), and CommError (kStore "store HOST:PORT unreachable ...", kRendezvous,
  // kUnauthorized, kTimeout) when the rendezvous fails.
  static std::unique_ptr<ProcessGroup> fromEnvironment(const GroupOptions& options = {});
  // Joins the group of `member.size` ranks that meet through `store`, which must outlive the
  // group; blocks until every rank is connected (or options.timeout_seconds pass). For a program
  // that has a store of its own (the Python package hands torch.distributed's), or runs its ranks
  // as threads over one in-process store. A group of one when member.size is 1: the store is not
  // used. Throws as fromEnvironment does, and GroupError for a rank out of range.
  static std::unique_ptr<ProcessGroup> overStore(Store& store, const GroupMember& member,
                                                 const GroupOptions& options = {});

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  int localRank() const;        // LOCAL_RANK: this process's index on its host (0 alone)
  int localSize() const;        // LOCAL_WORLD_SIZE (1 alone)
  uint64_t generation() const;  // CUMULUS_GENERATION: bumped by cumulus-run at every regroup
  int restartCount() const;     // CUMULUS_RESTART_COUNT
  std::string runId() const;    // CUMULUS_RUN_ID; empty when not started by cumulus-run
  bool underLauncher() const;   // CUMULUS_RUN_ID is set
  const GroupOptions& options() const;
  // Bytes this rank has handed to its transport since the group was made, cumulative over every
  // collective on it (blocking or async, every algorithm, a DataParallel's gradient sync
  // included): each message's 32-byte frame header and its payload, whether the payload went on a
  // socket or through shared memory; with the funnel, the requests sent to the parameter server.
  // An Elastic's group counts across the connections it re-formed over. The rendezvous's
  // handshakes do not count. 0 in a group of one. Never blocks.
  uint64_t bytesSent() const;
  // Per kind of collective ("allreduce", "broadcast", "allgather", ...; point-to-point not among
  // them), since the group was made and across its re-formed connections: how many ran (failed
  // ones included), the seconds they executed (not counting time queued behind others), and the
  // bytes handed to the transport meanwhile. In op name order; empty in a group of one. Callable
  // from any thread.
  std::vector<CollectiveStats> collectiveStats() const;

  // In place: every rank ends with the reduction over all ranks (kAvg: the sum / size()).
  void allreduce(torch::Tensor& tensor, const CollectiveOptions& options = {});
  // In place: every rank ends with `root`'s values. Throws std::invalid_argument for a bad root.
  void broadcast(torch::Tensor& tensor, int root = 0, const CollectiveOptions& options = {});
  // Returns the ranks' tensors stacked: shape {size(), tensor.sizes()...}, row r from rank r.
  torch::Tensor allgather(const torch::Tensor& tensor, const CollectiveOptions& options = {});
  // `tensor`'s first dimension must be a multiple of size() (std::invalid_argument otherwise).
  // Returns this rank's block of the reduction: rows [rank·n/size, (rank+1)·n/size).
  torch::Tensor reduceScatter(const torch::Tensor& tensor, const CollectiveOptions& options = {});
  // Returns once every rank has entered it.
  void barrier(const CollectiveOptions& options = {});
  // `root`'s tensor ends with the reduction over all ranks; the others' are left as they were.
  // A binomial tree (comm/tree.h): ⌈log₂p⌉ rounds, each rank's bytes sent once.
  void reduce(torch::Tensor& tensor, int root = 0, const CollectiveOptions& options = {});

  // Collectives that only move bytes take CPU tensors of any dtype (bool, uint8, int8, int16,
  // complex, ... as well). Each rank sends its bytes to the root alone (comm/exchange.h).
  //
  // gather: on `root`, `output` (contiguous, size() × input's elements, input's dtype) gets rank
  // r's `input` at block r; the other ranks pass a null output.
  void gather(const torch::Tensor& input, torch::Tensor* output, int root = 0,
              const CollectiveOptions& options = {});
  // scatter: `output` gets block rank() of the root's `input` (contiguous, size() × output's
  // elements, output's dtype); the other ranks pass a null input.
  void scatter(const torch::Tensor* input, torch::Tensor& output, int root = 0,
               const CollectiveOptions& options = {});
  // allToAll: `input`'s first dimension is cut into size() blocks of input_splits[j] rows (empty:
  // equal blocks), block j going to rank j; `output`'s likewise by output_splits, block j coming
  // from rank j (as torch.distributed.all_to_all_single). Both contiguous, of one dtype, with the
  // same elements per row. Splits that two ranks disagree on fail with CommError(kInvalid) naming
  // both sizes. Pairwise exchange in p−1 steps, every link busy both ways.
  void allToAll(const torch::Tensor& input, torch::Tensor& output,
                const std::vector<int64_t>& input_splits = {},
                const std::vector<int64_t>& output_splits = {},
                const CollectiveOptions& options = {});

  // Point-to-point, apart from the collectives' order: a send is matched to the receive of the
  // same tag on `peer`, in the order the sends were made (MPI's rules). They return at once; the
  // Work completes once the bytes are handed to the kernel (send) or have arrived (receive), and
  // its source() names the sender. Any dtype; the receive's tensor must have exactly the bytes
  // sent (CommError kInvalid naming both sizes otherwise). A message sent before its receive is
  // posted is buffered by the receiver, so ranks that send to each other before receiving do not
  // deadlock. Errors (the Work's): kTimeout when nothing arrives or is taken within the timeout,
  // kPeerClosed when the peer's connection closes. Needs GroupOptions::point_to_point
  // (std::invalid_argument otherwise) and a group of several ranks; `peer` must be another rank
  // of the group (std::invalid_argument).
  std::unique_ptr<Work> sendAsync(const torch::Tensor& tensor, int peer, int tag = 0,
                                  const CollectiveOptions& options = {});
  // `source` may be kAnySource.
  std::unique_ptr<Work> recvAsync(torch::Tensor& tensor, int source, int tag = 0,
                                  const CollectiveOptions& options = {});

  // The same as allreduce and broadcast, started on the group's background thread: they return
  // at once (after checking the arguments, which throws as the blocking calls do), and the Work
  // says when the result is in `tensor`. Overlap computation with communication, or start
  // several collectives and wait for them together. In a group of one the Work is complete.
  std::unique_ptr<Work> allreduceAsync(torch::Tensor& tensor,
                                       const CollectiveOptions& options = {});
  std::unique_ptr<Work> broadcastAsync(torch::Tensor& tensor, int root = 0,
                                       const CollectiveOptions& options = {});
  // allgather started likewise: `output` must be contiguous, of `tensor`'s dtype and of shape
  // {size(), tensor.sizes()...}; row r holds rank r's tensor once the Work is done
  // (std::invalid_argument otherwise).
  std::unique_ptr<Work> allgatherAsync(const torch::Tensor& tensor, torch::Tensor& output,
                                       const CollectiveOptions& options = {});

  // For implementations built on the group (DataParallel, PreemptionWatcher): the object that
  // runs the collectives. Not part of the stable API.
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  friend struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus
