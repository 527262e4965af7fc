#pragma once
// Communicator: one rank's member of a group of `world` ranks, connected over TCP or, to peers on
// the same host, shared memory and AF_UNIX sockets (comm/transport.h), running
// collectives on raw buffers (docs/comm.md).
//
// Construction performs the rendezvous (rendezvous.h) and blocks until every rank is connected or
// options.rendezvous_timeout (or, when that is zero, options.timeout) expires (CommError
// kRendezvous / kUnauthorized / kBadFrame / kStore).
//
// Every collective must be called by all ranks in the same order with matching arguments (same
// count and dtype; same root; same op; the same algorithm, so kAuto needs the same cost model on
// every rank). Each call gets the next sequence number; frames carry it, so a rank that disagrees
// is detected (kBadFrame or, if it waits for a message that never comes, kTimeout) instead of
// silently mixing data.
//
// Blocking calls run on the caller's thread (no hand-off: the latency path is one poll loop).
// The *Async variants queue the operation on the communicator's background thread and return a
// Work; queued and blocking operations execute strictly in call order. Async buffers must stay
// alive and untouched until the Work completes.
//
// Failure: a collective throws (or its Work holds) a CommError naming op, seq and peer within its
// timeout. After any failure the communicator is broken: it shuts its connections down (so peers
// fail fast rather than waiting for their timeouts) and every later call throws at once, naming
// the first error. Build a new Communicator (new generation) to recover.
//
// Whom an error names: the rank that failed first, not the neighbour this rank happened to be
// reading from. A rank that loses rank 1 shuts its connections, so its other peers lose it next
// and would blame a survivor. So before it shuts them, a failing rank records whom it blames in
// the Store (store_keys.h failedKey), and a rank that loses a peer which left such a record
// blames what that record names instead ("rank 1 failed first (rank 2 saw: ...)"). A peer that
// left no record died or hung itself (or is timing out at this very moment on another). The Store
// gets a second for this; gone or slow, a rank reports what it saw itself. The Store must outlive
// the communicator (its destructor waits for a record still being written).
//
// Thread-safety: all methods are thread-safe; calls from several threads are serialized. The
// cross-rank order must still be the same on every rank, which is the caller's job.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/annotated_mutex.h"
#include "comm/algorithm.h"
#include "comm/collective.h"
#include "comm/cost_model.h"
#include "comm/point_to_point.h"
#include "comm/store.h"
#include "comm/topology.h"
#include "comm/transport.h"
#include "comm/types.h"
#include "comm/work.h"

namespace cumulus::comm {

struct CommunicatorOptions {
  // Every restart of a job bumps the generation; frames and handshakes of another are rejected.
  uint64_t generation = 0;
  // Shared secret of the job (CUMULUS_JOB_TOKEN); proven by HMAC during the handshake.
  std::string job_token;
  // Default deadline of each collective, and of the rendezvous unless rendezvous_timeout is set.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // Deadline of the rendezvous alone; zero means `timeout`. Ranks start at different times (a
  // process linking LibTorch takes seconds to load on a busy host), so a program with short
  // collective deadlines gives its rendezvous a longer one.
  std::chrono::milliseconds rendezvous_timeout{0};
  // Address the data plane listens on and publishes. Loopback unless a host is named.
  std::string bind_host = "127.0.0.1";
  // The parameter server seam for Algorithm::kFunnel; not owned, may be null.
  RemoteReducer* remote_reducer = nullptr;
  // Decides Algorithm::kAuto.
  CostModel cost_model;
  // Pipeline segment of ring and tree (collective.h).
  size_t segment_bytes = kDefaultSegmentBytes;
  // SO_SNDBUF / SO_RCVBUF of data connections; 0 keeps the kernel's autotuning.
  int socket_buffer_bytes = 4 << 20;
  // What carries each peer (comm/transport.h). kAuto defers to CUMULUS_TRANSPORT and, when that
  // is unset too, uses shared memory (with an AF_UNIX socket for headers and liveness) to
  // same-host peers and TCP to the rest. Every rank should agree; a rank forced to kTcp publishes
  // no AF_UNIX name, so its peers reach it over TCP, and one forced to kUnix offers no shared
  // memory.
  Transport transport = Transport::kAuto;
  // How long a wait on a shared-memory peer spins on the shared segment before it sleeps in
  // poll() (tcp/transfer.h; a governor stops spinning while spins often run out). -1: the
  // environment's CUMULUS_SPIN_US if set, else 0 (sleep at once). Off by default because it did
  // not pay on the development VM: a 4 KiB p=2 tree all-reduce took 5.0-5.4 µs sleeping and
  // 5.5-5.6 µs with a 20 µs spin on an otherwise idle box, and the same within noise under load
  // (bench/results/allreduce.md). It is for hosts where waking a sleeping core is expensive.
  int spin_micros = -1;
  // Called on the operation's thread each time it goes to sleep because every shared-memory
  // slot to a peer is in use (the peer has not consumed them yet): tells a monitor, or a test,
  // that a sender waits on its receiver. Must not block or throw; empty: nothing is called.
  std::function<void()> on_slot_wait;
  // Which host this rank is on (rendezvous.h RendezvousConfig::host_id): ranks with equal ids
  // form one host of the topology and may share memory. Empty: localHostId(), the right answer
  // outside tests, which set distinct ids to simulate several hosts on one machine.
  std::string host_id;
  // Opens a point-to-point lane to every peer at the rendezvous (rendezvous.h) and runs send()
  // and recv() on them (point_to_point.h): one more connection per pair and one thread that
  // waits in poll(). Every rank must agree.
  bool point_to_point = false;
};

// Per-call options (c10d style). A zero timeout means the communicator's default.
struct OpOptions {
  std::chrono::milliseconds timeout{0};
};
struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  std::chrono::milliseconds timeout{0};
};

// What one kind of collective cost this rank (Communicator::opStats): how many ran (failed ones
// included), the seconds they executed (time queued behind others excluded), and the bytes this
// rank handed to its transport while they executed.
struct OpStats {
  uint64_t count = 0;
  double seconds = 0;
  uint64_t bytes_sent = 0;
};

class Communicator {
 public:
  // `store` must outlive the communicator (see "Whom an error names").
  Communicator(int rank, int world, Store& store, CommunicatorOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  const CommunicatorOptions& options() const { return options_; }

  // In place: every rank ends with the reduction of all ranks' buffers. kAvg: sum / world.
  // kFunnel without a RemoteReducer throws CommError(kInvalid).
  void allreduce(Buffer& buffer, const AllreduceOptions& options = {});
  std::shared_ptr<Work> allreduceAsync(Buffer& buffer, const AllreduceOptions& options = {});
  // Every rank ends with the root's buffer.
  void broadcast(Buffer& buffer, int root, const OpOptions& options = {});
  std::shared_ptr<Work> broadcastAsync(Buffer& buffer, int root, const OpOptions& options = {});
  // The root's buffer ends with the reduction; other ranks' buffers become unspecified.
  void reduce(Buffer& buffer, int root, ReduceOp op, const OpOptions& options = {});
  // output.count == world * input.count; block r of the output is rank r's input.
  void allgather(const Buffer& input, Buffer& output, const OpOptions& options = {});
  std::shared_ptr<Work> allgatherAsync(const Buffer& input, Buffer& output,
                                       const OpOptions& options = {});
  // input.count == world * output.count; rank r gets the reduction of block r.
  void reduceScatter(const Buffer& input, Buffer& output, ReduceOp op,
                     const OpOptions& options = {});
  // Returns once every rank has entered the barrier.
  void barrier(const OpOptions& options = {});

  // Collectives that move bytes of any dtype (exchange.h). gather: the root's `output` (world ×
  // bytes; null elsewhere) gets rank r's `input` at block r. scatter: rank r's `output` gets block
  // r of the root's `input` (world × bytes; null elsewhere). allToAll: rank r sends input block j
  // (send_bytes[j], blocks back to back in rank order) to rank j and gets rank j's block for r in
  // output block j (recv_bytes[j]); split sizes that disagree across ranks fail with kInvalid.
  void gather(const void* input, size_t bytes, void* output, int root,
              const OpOptions& options = {});
  void scatter(const void* input, void* output, size_t bytes, int root,
               const OpOptions& options = {});
  void allToAll(const void* input, const std::vector<size_t>& send_bytes, void* output,
                const std::vector<size_t>& recv_bytes, const OpOptions& options = {});

  // Point-to-point, apart from the collectives' order (point_to_point.h; the communicator must
  // have been made with CommunicatorOptions::point_to_point, else CommError kInvalid). They return
  // at once; the Work completes when the message is written / has arrived. A receive from
  // PointToPoint::kAnySource takes the first message with `tag` from any rank. Once the
  // communicator is broken, they fail as the collectives do.
  std::shared_ptr<Work> send(const void* data, size_t bytes, int peer, uint32_t tag,
                             const OpOptions& options = {});
  std::shared_ptr<ReceiveWork> recv(void* data, size_t bytes, int source, uint32_t tag,
                                    const OpOptions& options = {});

  // Which ranks share a host, as every rank published it at the rendezvous.
  const Topology& topology() const { return topology_; }
  // The algorithm kAuto resolves to for `bytes` on this group (hierarchical only when the
  // topology has several hosts with several ranks each, all alike).
  Algorithm resolve(Algorithm algorithm, size_t bytes) const;
  // Sequence number the next collective will get (the first is 1).
  uint64_t nextSeq() const;
  // "shm", "unix" or "tcp": what connects this rank to `peer`; "self" for its own rank.
  const char* transportTo(int peer) const;
  // Bytes this rank has handed to its transport since construction, over every collective
  // (blocking or async, every algorithm): each message's 32-byte frame header and its payload, on
  // the socket or through a shared-memory slot (tcp/frame.h), counted once the whole message is
  // handed over; for the funnel, the request it sent to the parameter server
  // (RemoteReducer::allreduce). The rendezvous's handshakes are not counted. 0 in a world of one.
  // Cheap (a relaxed atomic add per message) and callable from any thread.
  uint64_t bytesSent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  // Per collective ("allreduce", "broadcast", "allgather", "reduce", "reduce_scatter", "barrier",
  // "gather", "scatter", "all_to_all"), since construction; point-to-point is not among them.
  // Callable from any thread.
  std::map<std::string, OpStats> opStats() const;

 private:
  using Body = std::function<void(Collective&)>;
  struct Queued {
    Body body;
    std::chrono::milliseconds timeout;
    std::shared_ptr<Work> work;
    uint8_t element = 0;  // net::OpContext::element: what the frames carry
  };

  std::shared_ptr<Work> startAllreduce(Buffer& buffer, const AllreduceOptions& options, bool async);
  std::shared_ptr<Work> startBroadcast(Buffer& buffer, int root, const OpOptions& options,
                                       bool async);
  std::shared_ptr<Work> startAllgather(const Buffer& input, Buffer& output,
                                       const OpOptions& options, bool async);
  // Assigns the next sequence number; runs `body` inline when !async and nothing is queued,
  // otherwise queues it for the worker (and waits when !async). Blocking calls rethrow.
  // `element`: the dtype the frames carry, for the receivers to check (none: raw bytes).
  std::shared_ptr<Work> submit(const char* op, std::chrono::milliseconds timeout, Body body,
                               bool async, std::optional<DType> element = std::nullopt);
  void execute(const Queued& item);
  // The error to report for `error`: when it blames a peer that left a failure record, one that
  // names what the record names; records this rank's own. Never throws.
  std::exception_ptr traceFailure(const std::exception_ptr& error);
  void workerLoop();
  void validate(const char* op, const Buffer& buffer) const;
  void checkRoot(const char* op, int root) const;
  // kInvalid unless `reduction` can reduce `dtype` (reduceProblem in types.h).
  void checkReduction(const char* op, DType dtype, ReduceOp reduction) const;
  PointToPoint& pointToPoint(const char* op) const;
  // A per-call timeout, or else the communicator's.
  std::chrono::milliseconds timeoutOf(const OpOptions& options) const;

  const int rank_;
  const int world_;
  const CommunicatorOptions options_;
  Store& store_;  // outlives us; failure records (traceFailure)
  std::vector<std::unique_ptr<net::Pair>> pairs_;
  std::unique_ptr<PointToPoint> point_to_point_;  // with options_.point_to_point and world > 1
  Topology topology_;
  std::vector<uint8_t> scratch_;  // used only by the executing operation
  net::SpinGovernor spin_;        // budget resolved from options_.spin_micros; executing op only
  std::atomic<uint64_t> bytes_sent_{0};  // bytesSent(); added to by the executing operation

  mutable base::Mutex mutex_;
  base::CondVar changed_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mutex_) = 1;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, OpStats> op_stats_ ABSL_GUARDED_BY(mutex_);
  bool busy_ ABSL_GUARDED_BY(mutex_) = false;  // an operation is executing
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::exception_ptr broken_ ABSL_GUARDED_BY(mutex_);  // the first failure
  // traceFailure's Store calls, when they outlasted its wait; the destructor waits for them.
  std::future<void> failure_lookup_ ABSL_GUARDED_BY(mutex_);
  std::thread worker_;  // started by the first async call
};

}  // namespace cumulus::comm
