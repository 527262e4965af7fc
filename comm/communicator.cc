#include "comm/communicator.h"

#include <future>
#include <optional>
#include <stdexcept>

#include "base/integer.h"
#include "base/run_env.h"
#include "comm/error.h"
#include "comm/exchange.h"
#include "comm/hierarchical.h"
#include "comm/rendezvous.h"
#include "comm/ring.h"
#include "comm/store_keys.h"
#include "comm/tree.h"

namespace cumulus::comm {
namespace {

// The first failure, re-raised for a later operation with that operation's identity.
CommError brokenError(const std::exception_ptr& first, const char* op, uint64_t seq) {
  try {
    std::rethrow_exception(first);
  } catch (const CommError& e) {
    return CommError(e.kind(), op, seq, e.peer(),
                     std::string("communicator is broken by an earlier failure: ") + e.what());
  } catch (const std::exception& e) {
    return CommError(ErrorKind::kInvalid, op, seq, -1,
                     std::string("communicator is broken by an earlier failure: ") + e.what());
  }
}

// A failure record (store_keys.h failedKey): whom a rank blames, what kind of failure, and who saw
// it first and what they saw.
struct FailureRecord {
  int blamed = -1;
  ErrorKind kind = ErrorKind::kPeerClosed;
  int observer = -1;
  std::string seen;

  std::string encode() const {
    return std::to_string(blamed) + "\n" + std::to_string(static_cast<int>(kind)) + "\n" +
           std::to_string(observer) + "\n" + seen;
  }
  // nullopt for anything malformed or out of range: such a record is ignored.
  static std::optional<FailureRecord> decode(const std::string& text, int world) {
    std::vector<std::string> fields;
    size_t begin = 0;
    for (int i = 0; i < 3; ++i) {
      const size_t end = text.find('\n', begin);
      if (end == std::string::npos) return std::nullopt;
      fields.push_back(text.substr(begin, end - begin));
      begin = end + 1;
    }
    const std::optional<int64_t> blamed = base::parseInteger(fields[0], 0, world - 1);
    const std::optional<int64_t> kind =
        base::parseInteger(fields[1], 0, static_cast<int64_t>(ErrorKind::kInvalid));
    const std::optional<int64_t> observer = base::parseInteger(fields[2], 0, world - 1);
    if (!blamed || !kind || !observer) return std::nullopt;
    return FailureRecord{static_cast<int>(*blamed), static_cast<ErrorKind>(*kind),
                         static_cast<int>(*observer), text.substr(begin)};
  }
};

// How long a failing rank waits for the Store to read and write failure records
// (traceFailure) before it reports what it saw itself.
constexpr auto kFailureLookup = std::chrono::milliseconds(1000);

int resolveSpin(int requested) {
  if (requested >= 0) return requested;
  try {
    return static_cast<int>(base::DataPlaneEnv::fromEnvironment().spin_microseconds.value_or(0));
  } catch (const base::EnvError& e) {
    throw CommError(ErrorKind::kInvalid, "rendezvous", 0, -1, e.what());
  }
}

}  // namespace

Communicator::Communicator(int rank, int world, Store& store, CommunicatorOptions options)
    : rank_(rank), world_(world), options_(std::move(options)), store_(store) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw CommError(
        ErrorKind::kInvalid, "rendezvous", 0, -1,
        "rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world));
  }
  if (options_.timeout.count() <= 0 || options_.segment_bytes == 0) {
    throw CommError(ErrorKind::kInvalid, "rendezvous", 0, -1,
                    "communicator timeout and segment size must be positive");
  }
  RendezvousConfig config;
  config.rank = rank;
  config.world = world;
  config.generation = options_.generation;
  config.token = options_.job_token;
  config.bind_host = options_.bind_host;
  config.socket_buffer_bytes = options_.socket_buffer_bytes;
  config.segment_bytes = options_.segment_bytes;
  config.host_id = options_.host_id;
  config.point_to_point = options_.point_to_point;
  try {
    config.transport =
        options_.transport != Transport::kAuto ? options_.transport : transportFromEnvironment();
  } catch (const std::invalid_argument& e) {
    throw CommError(ErrorKind::kInvalid, "rendezvous", 0, -1, e.what());
  }
  config.deadline =
      net::Clock::now() +
      (options_.rendezvous_timeout.count() > 0 ? options_.rendezvous_timeout : options_.timeout);
  Mesh mesh = connectMesh(store, config);
  pairs_ = std::move(mesh.pairs);
  if (options_.point_to_point && world > 1) {
    point_to_point_ = std::make_unique<PointToPoint>(rank, world, options_.generation,
                                                     std::move(mesh.lanes), &bytes_sent_);
  }
  topology_ = Topology(collectHostIds(store, config));
  spin_.budget_us = resolveSpin(options_.spin_micros);
}

Communicator::~Communicator() {
  std::deque<Queued> abandoned;
  {
    base::MutexLock lock(mutex_);
    stopping_ = true;
    abandoned.swap(queue_);
    changed_.notify_all();
    changed_.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !busy_; });
  }
  for (auto& item : abandoned) {
    item.work->finish(std::make_exception_ptr(
        CommError(ErrorKind::kInvalid, item.work->op(), item.work->seq(), -1,
                  "the communicator was destroyed before the operation ran")));
  }
  if (worker_.joinable()) worker_.join();
  {
    base::MutexLock lock(mutex_);
    if (failure_lookup_.valid()) failure_lookup_.wait();  // a failure record still being written
  }
  point_to_point_.reset();  // fails its pending sends and receives, then stops its thread
}

const char* Communicator::transportTo(int peer) const {
  if (peer < 0 || peer >= world_) {
    throw CommError(
        ErrorKind::kInvalid, "transportTo", 0, peer,
        "rank " + std::to_string(peer) + " is not in a world of " + std::to_string(world_));
  }
  const auto& pair = pairs_[static_cast<size_t>(peer)];
  return pair ? pair->transport() : "self";
}

std::map<std::string, OpStats> Communicator::opStats() const {
  base::MutexLock lock(mutex_);
  return op_stats_;
}

uint64_t Communicator::nextSeq() const {
  base::MutexLock lock(mutex_);
  return next_seq_;
}

Algorithm Communicator::resolve(Algorithm algorithm, size_t bytes) const {
  if (algorithm != Algorithm::kAuto) return algorithm;
  return options_.cost_model.pick(static_cast<double>(bytes), topology_,
                                  options_.remote_reducer != nullptr);
}

std::shared_ptr<Work> Communicator::submit(const char* op, std::chrono::milliseconds timeout,
                                           Body body, bool async, std::optional<DType> element) {
  base::MutexLock lock(mutex_);
  if (stopping_) throw CommError(ErrorKind::kInvalid, op, next_seq_, -1, "communicator is closing");
  auto work = std::make_shared<Work>(op, next_seq_++);
  Queued item{std::move(body), timeout.count() > 0 ? timeout : options_.timeout, work,
              element ? static_cast<uint8_t>(static_cast<uint8_t>(*element) + 1) : uint8_t{0}};
  if (!async && queue_.empty() && !busy_) {
    // The fast path: nothing is queued, so run right here without waking another thread.
    busy_ = true;
    lock.unlock();
    execute(item);
    lock.lock();
    busy_ = false;
    changed_.notify_all();
    lock.unlock();
    work->wait();
    return work;
  }
  queue_.push_back(std::move(item));
  if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
  changed_.notify_all();
  lock.unlock();
  if (!async) work->wait();
  return work;
}

void Communicator::workerLoop() {
  base::MutexLock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return stopping_ || (!queue_.empty() && !busy_);
    });
    if (stopping_) return;
    Queued item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    execute(item);
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

void Communicator::execute(const Queued& item) {
  const char* op = item.work->op().c_str();
  const uint64_t seq = item.work->seq();
  {
    base::MutexLock lock(mutex_);
    if (broken_) {
      item.work->finish(std::make_exception_ptr(brokenError(broken_, op, seq)));
      return;
    }
  }
  Collective c;
  c.rank = rank_;
  c.world = world_;
  for (auto& pair : pairs_) c.pairs.push_back(pair.get());
  c.op.op = op;
  c.op.seq = seq;
  c.op.generation = options_.generation;
  c.op.deadline = net::Clock::now() + item.timeout;
  c.op.timeout_ms = static_cast<long>(item.timeout.count());
  c.op.spin = &spin_;
  c.op.on_slot_wait = options_.on_slot_wait ? &options_.on_slot_wait : nullptr;
  c.op.bytes_sent = &bytes_sent_;
  c.op.element = item.element;
  c.segment_bytes = options_.segment_bytes;
  c.scratch = &scratch_;
  const auto started = std::chrono::steady_clock::now();
  const uint64_t sent_before = bytes_sent_.load(std::memory_order_relaxed);
  const auto account = [&] {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const uint64_t sent = bytes_sent_.load(std::memory_order_relaxed) - sent_before;
    base::MutexLock lock(mutex_);
    OpStats& stats = op_stats_[item.work->op()];
    ++stats.count;
    stats.seconds += seconds;
    stats.bytes_sent += sent;
  };
  try {
    item.body(c);
    account();
    item.work->finish(nullptr);
  } catch (...) {
    account();
    std::exception_ptr error = traceFailure(std::current_exception());
    {
      base::MutexLock lock(mutex_);
      if (!broken_) broken_ = error;
    }
    // Peers blocked on us fail now (kPeerClosed) instead of at their timeouts.
    for (auto& pair : pairs_) {
      if (pair) pair->abort();
    }
    if (point_to_point_) point_to_point_->abort(error);
    item.work->finish(error);
  }
}

std::exception_ptr Communicator::traceFailure(const std::exception_ptr& error) {
  const CommError* seen = nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const CommError& e) {
    seen = &e;
  } catch (...) {
  }
  // Only a lost or silent peer may have failed for another's sake; a lying one is to blame.
  if (seen == nullptr || seen->peer() < 0 || seen->peer() >= world_ ||
      (seen->kind() != ErrorKind::kPeerClosed && seen->kind() != ErrorKind::kTimeout)) {
    return error;
  }
  const FailureRecord own{seen->peer(), seen->kind(), rank_, seen->what()};
  // A peer that shut its connections because of a failure of its own wrote its record first, so
  // a plain read finds it. (One we timed out on may be timing out on someone else at this very
  // moment; waiting for its record would add the wait to every timeout, so we do not: if it is
  // not there yet, we name the peer we waited on.) The Store's calls run on a thread of their
  // own, given kFailureLookup: a Store that is gone (its host died with the peer) would hold an
  // error back for its whole retry time; the destructor waits for that thread.
  const uint64_t generation = options_.generation;
  const int rank = rank_, world = world_;
  Store& store = store_;
  auto traced = std::make_shared<FailureRecord>(own);  // read only once the lookup is done
  std::future<void> lookup =
      std::async(std::launch::async, [&store, traced, generation, rank, world] {
        try {
          const std::string theirs_key = failedKey(generation, traced->blamed);
          if (std::optional<std::string> theirs = store.tryGet(theirs_key)) {
            std::optional<FailureRecord> record = FailureRecord::decode(*theirs, world);
            if (record && record->blamed != rank) *traced = *record;  // not a failure of ours
          }
          store.set(failedKey(generation, rank), traced->encode());
        } catch (const std::exception&) {
          // The Store is gone or failing: report what this rank saw itself.
          *traced = FailureRecord{};
        }
      });
  FailureRecord mine = own;
  if (lookup.wait_for(kFailureLookup) == std::future_status::ready) {
    if (traced->blamed >= 0) mine = *traced;
  } else {
    base::MutexLock lock(mutex_);
    failure_lookup_ = std::move(lookup);
  }
  if (mine.blamed == seen->peer()) return error;
  return std::make_exception_ptr(
      CommError(mine.kind, seen->op(), seen->seq(), mine.blamed,
                "rank " + std::to_string(mine.blamed) + " failed first (rank " +
                    std::to_string(mine.observer) + " saw: " + mine.seen + "); then rank " +
                    std::to_string(seen->peer()) + " left too (" + seen->what() + ")"));
}

void Communicator::validate(const char* op, const Buffer& buffer) const {
  if (buffer.count > 0 && buffer.data == nullptr) {
    throw CommError(ErrorKind::kInvalid, op, nextSeq(), -1,
                    "buffer of " + std::to_string(buffer.count) + " elements has no data");
  }
}

void Communicator::checkRoot(const char* op, int root) const {
  if (root < 0 || root >= world_) {
    throw CommError(
        ErrorKind::kInvalid, op, nextSeq(), -1,
        "root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(world_));
  }
}

void Communicator::checkReduction(const char* op, DType dtype, ReduceOp reduction) const {
  const std::string problem = reduceProblem(dtype, reduction);
  if (!problem.empty()) throw CommError(ErrorKind::kInvalid, op, nextSeq(), -1, problem);
}

std::shared_ptr<Work> Communicator::startAllreduce(Buffer& buffer, const AllreduceOptions& options,
                                                   bool async) {
  validate("allreduce", buffer);
  checkReduction("allreduce", buffer.dtype, options.op);
  const Algorithm algorithm = resolve(options.algorithm, buffer.bytes());
  if (algorithm == Algorithm::kFunnel && options_.remote_reducer == nullptr) {
    throw CommError(ErrorKind::kInvalid, "allreduce", nextSeq(), -1,
                    "the funnel algorithm needs a parameter server endpoint: give the "
                    "communicator a RemoteReducer (comm/funnel.h) or choose tree, ring, "
                    "hierarchical or auto");
  }
  Buffer b = buffer;
  const ReduceOp op = options.op;
  RemoteReducer* remote = options_.remote_reducer;
  const Topology* topology = &topology_;
  return submit(
      "allreduce", options.timeout,
      [b, op, algorithm, remote, topology](Collective& c) mutable {
        switch (algorithm) {
          case Algorithm::kRing:
            return ringAllreduce(c, b, op);
          case Algorithm::kHierarchical:
            return hierarchicalAllreduce(c, *topology, b, op);
          case Algorithm::kTree:
            return treeAllreduce(c, b, op);
          case Algorithm::kFunnel: {
            const uint64_t sent =
                remote->allreduce(b, op, c.op.seq, std::chrono::milliseconds(c.op.timeout_ms));
            c.op.bytes_sent->fetch_add(sent, std::memory_order_relaxed);
            return;
          }
          case Algorithm::kAuto:
            break;
        }
      },
      async, b.dtype);
}

std::shared_ptr<Work> Communicator::startBroadcast(Buffer& buffer, int root,
                                                   const OpOptions& options, bool async) {
  validate("broadcast", buffer);
  checkRoot("broadcast", root);
  Buffer b = buffer;
  return submit(
      "broadcast", options.timeout, [b, root](Collective& c) mutable { treeBroadcast(c, b, root); },
      async, b.dtype);
}

void Communicator::reduce(Buffer& buffer, int root, ReduceOp op, const OpOptions& options) {
  validate("reduce", buffer);
  checkRoot("reduce", root);
  checkReduction("reduce", buffer.dtype, op);
  Buffer b = buffer;
  submit(
      "reduce", options.timeout,
      [b, root, op](Collective& c) mutable { treeReduce(c, b, op, root); }, false, b.dtype);
}

std::shared_ptr<Work> Communicator::startAllgather(const Buffer& input, Buffer& output,
                                                   const OpOptions& options, bool async) {
  validate("allgather", input);
  validate("allgather", output);
  if (output.count != input.count * static_cast<size_t>(world_) || output.dtype != input.dtype) {
    throw CommError(ErrorKind::kInvalid, "allgather", nextSeq(), -1,
                    "output must hold world × input elements of the same dtype: got " +
                        std::to_string(output.count) + " " + dtypeName(output.dtype) + " for " +
                        std::to_string(input.count) + " " + dtypeName(input.dtype) + " × " +
                        std::to_string(world_));
  }
  Buffer in = input, out = output;
  return submit(
      "allgather", options.timeout, [in, out](Collective& c) mutable { ringAllgather(c, in, out); },
      async, in.dtype);
}

void Communicator::reduceScatter(const Buffer& input, Buffer& output, ReduceOp op,
                                 const OpOptions& options) {
  validate("reduce_scatter", input);
  validate("reduce_scatter", output);
  if (input.count != output.count * static_cast<size_t>(world_) || output.dtype != input.dtype) {
    throw CommError(ErrorKind::kInvalid, "reduce_scatter", nextSeq(), -1,
                    "input must hold world × output elements of the same dtype: got " +
                        std::to_string(input.count) + " " + dtypeName(input.dtype) + " for " +
                        std::to_string(output.count) + " " + dtypeName(output.dtype) + " × " +
                        std::to_string(world_));
  }
  checkReduction("reduce_scatter", input.dtype, op);
  Buffer in = input, out = output;
  submit(
      "reduce_scatter", options.timeout,
      [in, out, op](Collective& c) mutable { ringReduceScatter(c, in, out, op); }, false, in.dtype);
}

void Communicator::barrier(const OpOptions& options) {
  submit(
      "barrier", options.timeout,
      [](Collective& c) {
        int32_t token = 1;
        Buffer b{&token, 1, DType::kInt32};
        treeAllreduce(c, b, ReduceOp::kSum);
      },
      false, DType::kInt32);
}

std::chrono::milliseconds Communicator::timeoutOf(const OpOptions& options) const {
  return options.timeout.count() > 0 ? options.timeout : options_.timeout;
}

void Communicator::gather(const void* input, size_t bytes, void* output, int root,
                          const OpOptions& options) {
  checkRoot("gather", root);
  if (bytes > 0 && (input == nullptr || (rank_ == root && output == nullptr))) {
    throw CommError(ErrorKind::kInvalid, "gather", nextSeq(), -1,
                    "every rank needs an input, and the root an output");
  }
  submit(
      "gather", options.timeout,
      [=](Collective& c) { directGather(c, input, bytes, output, root); }, false);
}

void Communicator::scatter(const void* input, void* output, size_t bytes, int root,
                           const OpOptions& options) {
  checkRoot("scatter", root);
  if (bytes > 0 && (output == nullptr || (rank_ == root && input == nullptr))) {
    throw CommError(ErrorKind::kInvalid, "scatter", nextSeq(), -1,
                    "every rank needs an output, and the root an input");
  }
  submit(
      "scatter", options.timeout,
      [=](Collective& c) { directScatter(c, input, output, bytes, root); }, false);
}

void Communicator::allToAll(const void* input, const std::vector<size_t>& send_bytes, void* output,
                            const std::vector<size_t>& recv_bytes, const OpOptions& options) {
  const auto world = static_cast<size_t>(world_);
  if (send_bytes.size() != world || recv_bytes.size() != world) {
    throw CommError(ErrorKind::kInvalid, "all_to_all", nextSeq(), -1,
                    "split sizes for " + std::to_string(send_bytes.size()) + " and " +
                        std::to_string(recv_bytes.size()) + " ranks in a world of " +
                        std::to_string(world_));
  }
  const auto self = static_cast<size_t>(rank_);
  if (send_bytes[self] != recv_bytes[self]) {
    throw CommError(ErrorKind::kInvalid, "all_to_all", nextSeq(), -1,
                    "rank " + std::to_string(rank_) + " sends itself " +
                        std::to_string(send_bytes[self]) + " bytes but receives " +
                        std::to_string(recv_bytes[self]));
  }
  // Blocking, so the vectors outlive the operation.
  submit(
      "all_to_all", options.timeout,
      [&](Collective& c) { pairwiseAllToAll(c, input, send_bytes, output, recv_bytes); }, false);
}

PointToPoint& Communicator::pointToPoint(const char* op) const {
  if (!point_to_point_) {
    throw CommError(ErrorKind::kInvalid, op, 0, -1,
                    world_ == 1 ? std::string("a world of one has no peer to exchange with")
                                : std::string("this communicator has no point-to-point lanes "
                                              "(CommunicatorOptions::point_to_point)"));
  }
  return *point_to_point_;
}

std::shared_ptr<Work> Communicator::send(const void* data, size_t bytes, int peer, uint32_t tag,
                                         const OpOptions& options) {
  return pointToPoint("send").send(peer, tag, data, bytes, timeoutOf(options));
}

std::shared_ptr<ReceiveWork> Communicator::recv(void* data, size_t bytes, int source, uint32_t tag,
                                                const OpOptions& options) {
  return pointToPoint("recv").recv(source, tag, data, bytes, timeoutOf(options));
}

void Communicator::allreduce(Buffer& buffer, const AllreduceOptions& options) {
  startAllreduce(buffer, options, false);
}
std::shared_ptr<Work> Communicator::allreduceAsync(Buffer& buffer,
                                                   const AllreduceOptions& options) {
  return startAllreduce(buffer, options, true);
}
void Communicator::broadcast(Buffer& buffer, int root, const OpOptions& options) {
  startBroadcast(buffer, root, options, false);
}
std::shared_ptr<Work> Communicator::broadcastAsync(Buffer& buffer, int root,
                                                   const OpOptions& options) {
  return startBroadcast(buffer, root, options, true);
}
void Communicator::allgather(const Buffer& input, Buffer& output, const OpOptions& options) {
  startAllgather(input, output, options, false);
}
std::shared_ptr<Work> Communicator::allgatherAsync(const Buffer& input, Buffer& output,
                                                   const OpOptions& options) {
  return startAllgather(input, output, options, true);
}

}  // namespace cumulus::comm
