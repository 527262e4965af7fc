#include "comm/parameter_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include "comm/parameter_server_service.h"
#include "comm/reduce.h"
#include "comm/rpc_common.h"
#include "comm/types.h"
#include "proto/parameter_server.grpc.pb.h"

namespace cumulus::comm {

namespace {

using Clock = std::chrono::steady_clock;
using StepKey = std::pair<uint64_t, uint64_t>;  // (generation, seq)

constexpr auto kStepPollInterval = std::chrono::milliseconds(50);
constexpr size_t kMaxRemembered = 1024;
constexpr char kRankMetadataKey[] = "x-cumulus-rank";
constexpr uint32_t kMaxDType = static_cast<uint32_t>(DType::kInt64);
constexpr uint32_t kMaxReduceOp = static_cast<uint32_t>(ReduceOp::kBxor);

struct Failure {
  grpc::Status status;
  int rank = -1;  // the rank to blame, -1 for none
};

std::string describe(const proto::PushHeader& h) {
  std::string text = "world=" + std::to_string(h.world());
  text += " dtype=" + std::string(h.dtype() <= kMaxDType ? dtypeName(static_cast<DType>(h.dtype()))
                                                         : "?" + std::to_string(h.dtype()));
  text += " op=" + std::string(h.op() <= kMaxReduceOp ? reduceOpName(static_cast<ReduceOp>(h.op()))
                                                      : "?" + std::to_string(h.op()));
  text += " count=" + std::to_string(h.count());
  return text;
}

std::string stepName(const StepKey& key) {
  return "generation " + std::to_string(key.first) + " seq " + std::to_string(key.second);
}

// The state of one all-reduce step. Everything is guarded by the service's mutex_, except the
// bytes of `result` in piece k, which belong to the thread that set busy[k]. Not annotated: a
// member's ABSL_GUARDED_BY can only name a mutex that the struct itself can reach.
struct Step {
  Step(const StepKey& step_key, const proto::PushHeader& h)
      : key(step_key),
        header(h),
        first_rank(static_cast<int>(h.rank())),
        world(static_cast<int>(h.world())),
        dtype(static_cast<DType>(h.dtype())),
        op(static_cast<ReduceOp>(h.op())),
        bytes(h.count() * elementSize(dtype)),
        chunks((bytes + ParameterServer::kChunkBytes - 1) / ParameterServer::kChunkBytes),
        result(new char[bytes > 0 ? bytes : 1]),
        next_rank(chunks, 0),
        busy(chunks, 0),
        early(chunks),
        joined(world, 0),
        pushed(world, 0) {}

  size_t pieceBytes(size_t k) const {
    return std::min(ParameterServer::kChunkBytes, bytes - k * ParameterServer::kChunkBytes);
  }
  bool complete() const { return joined_count == world && chunks_done == chunks; }

  const StepKey key;
  const proto::PushHeader header;  // of the first rank to arrive: the reference for the others
  const int first_rank;
  const int world;
  const DType dtype;
  const ReduceOp op;
  const size_t bytes;
  const size_t chunks;
  std::unique_ptr<char[]> result;
  std::vector<int> next_rank;                     // per piece: the next rank to fold in
  std::vector<char> busy;                         // per piece: a thread is folding it
  std::vector<std::map<int, std::string>> early;  // per piece: arrived before predecessors
  std::vector<char> joined, pushed;
  int joined_count = 0;
  size_t chunks_done = 0;
  int left = 0;  // handlers that returned
  Clock::time_point wait_deadline = Clock::time_point::max();
  std::optional<Failure> failure;
};

}  // namespace

class ParameterServerService final : public proto::ParameterServer::Service,
                                     public PushPullHandler {
 public:
  ParameterServerService(std::string token, int world) : token_(std::move(token)), world_(world) {}

  void shutdown() {
    base::MutexLock lock(mutex_);
    shutting_down_ = true;
    while (!steps_.empty())
      failLocked(steps_.begin()->second,
                 {grpc::Status(grpc::StatusCode::UNAVAILABLE, "parameter server shutting down")});
  }

  ParameterServer::StepProgress progress(const StepKey& key) {
    base::MutexLock lock(mutex_);
    ParameterServer::StepProgress out;
    const auto it = steps_.find(key);
    if (it == steps_.end()) return out;
    const Step& step = *it->second;
    for (int r = 0; r < step.world; ++r) {
      if (step.joined[r]) out.joined.push_back(r);
      if (step.pushed[r]) out.pushed.push_back(r);
    }
    return out;
  }

  grpc::Status PushPull(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<proto::PullChunk, proto::PushChunk>* stream) override {
    return pushPull(*context, *stream);
  }

  grpc::Status pushPull(grpc::ServerContext& context, PushPullStream& stream) override {
    if (auto status = rpc::checkToken(context, token_); !status.ok()) return status;
    Failure outcome;
    try {
      outcome = serve(context, stream);
    } catch (const std::exception& e) {
      outcome = {
          grpc::Status(grpc::StatusCode::INTERNAL, std::string("parameter server: ") + e.what())};
    } catch (...) {
      outcome = {grpc::Status(grpc::StatusCode::INTERNAL, "parameter server: unknown exception")};
    }
    if (outcome.rank >= 0)
      context.AddTrailingMetadata(kRankMetadataKey, std::to_string(outcome.rank));
    return outcome.status;
  }

 private:
  // Leaves the step when the handler returns, however it returns: a rank that leaves before
  // the result is ready fails the step for the others.
  class Membership {
   public:
    Membership(ParameterServerService* service, std::shared_ptr<Step> step, int rank)
        : service_(service), step_(std::move(step)), rank_(rank) {}
    ~Membership() { service_->leave(step_, rank_); }

   private:
    ParameterServerService* service_;
    std::shared_ptr<Step> step_;
    int rank_;
  };

  Failure serve(grpc::ServerContext& context, PushPullStream& stream) {
    proto::PushChunk message;
    if (!stream.Read(&message))
      return {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "stream closed before a header")};
    if (!message.has_header())
      return {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message has no header")};
    const proto::PushHeader header = message.header();
    const int rank = static_cast<int>(header.rank());

    std::shared_ptr<Step> step;
    if (auto failure = join(header, &step)) return *failure;
    Membership membership(this, step, rank);

    // Push: pieces arrive in order; each is handed to the fold of its piece index.
    size_t received = 0;
    for (size_t k = 0; received < step->bytes; ++k) {
      if (k > 0) {
        message.Clear();
        if (!stream.Read(&message))
          return fail(
              step, {grpc::Status(grpc::StatusCode::ABORTED,
                                  "rank " + std::to_string(rank) + " disconnected mid-push after " +
                                      std::to_string(received) + " of " +
                                      std::to_string(step->bytes) + " bytes"),
                     rank});
        if (message.has_header())
          return fail(step, {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                          "rank " + std::to_string(rank) + " sent a second header"),
                             rank});
      }
      if (auto failure = accept(step, rank, k, received, message.mutable_data())) return *failure;
      received += step->pieceBytes(k);
    }
    if (step->bytes == 0 && !message.data().empty())
      return fail(step, {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "rank " + std::to_string(rank) + " sent data for count=0"),
                         rank});

    if (auto failure = awaitResult(context, step, rank)) return *failure;

    // Pull: the result is immutable once complete, so every handler reads it unlocked.
    for (size_t k = 0; k < step->chunks; ++k) {
      proto::PullChunk out;
      out.set_data(step->result.get() + k * ParameterServer::kChunkBytes, step->pieceBytes(k));
      grpc::WriteOptions options;
      if (k + 1 == step->chunks) options.set_last_message();  // coalesced with the status
      if (!stream.Write(out, options))
        return {grpc::Status(grpc::StatusCode::CANCELLED,
                             "rank " + std::to_string(rank) + " went away during the pull")};
    }
    return {grpc::Status::OK};
  }

  // Validates the header and adds the rank to its step (creating the step if it is the first).
  std::optional<Failure> join(const proto::PushHeader& h, std::shared_ptr<Step>* out) {
    base::MutexLock lock(mutex_);
    const StepKey key{h.generation(), h.seq()};
    const int rank = static_cast<int>(h.rank());
    if (shutting_down_)
      return Failure{grpc::Status(grpc::StatusCode::UNAVAILABLE, "parameter server shutting down")};
    if (h.generation() < generation_)
      return Failure{grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                  "rank " + std::to_string(rank) + " pushed for stale generation " +
                                      std::to_string(h.generation()) +
                                      "; the parameter server is at generation " +
                                      std::to_string(generation_)),
                     rank};
    if (h.generation() > generation_) supersede(h.generation());
    if (auto it = remembered_.find(key); it != remembered_.end()) return it->second;

    auto invalid = [&](const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      Failure failure{grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   stepName(key) + ": rank " + std::to_string(rank) + " " + why),
                      rank};
      auto it = steps_.find(key);
      if (it != steps_.end()) return failLocked(it->second, failure);
      remember(key, failure);
      return failure;
    };
    if (h.world() != static_cast<uint32_t>(world_))
      return invalid("says world size " + std::to_string(h.world()) +
                     " but the parameter server serves " + std::to_string(world_));
    if (h.rank() >= h.world())
      return invalid("is out of range for world size " + std::to_string(h.world()));
    if (h.dtype() > kMaxDType || h.op() > kMaxReduceOp)
      return invalid("sent an unknown dtype or op (" + describe(h) + ")");
    if (const std::string problem =
            reduceProblem(static_cast<DType>(h.dtype()), static_cast<ReduceOp>(h.op()));
        !problem.empty())
      return invalid("sent an op its dtype does not take: " + problem);
    const size_t element = elementSize(static_cast<DType>(h.dtype()));
    if (h.count() > ParameterServer::kMaxStepBytes / element)
      return invalid("sent count=" + std::to_string(h.count()) + ", over the limit of " +
                     std::to_string(ParameterServer::kMaxStepBytes) + " bytes per step");

    auto& step = steps_[key];
    if (!step) step = std::make_shared<Step>(key, h);
    const proto::PushHeader& ref = step->header;
    if (ref.world() != h.world() || ref.dtype() != h.dtype() || ref.op() != h.op() ||
        ref.count() != h.count())
      return invalid("sent " + describe(h) + " but rank " + std::to_string(step->first_rank) +
                     " sent " + describe(ref));
    if (step->joined[rank]) return invalid("pushed twice");
    step->joined[rank] = 1;
    ++step->joined_count;
    if (h.timeout_ms() > 0)
      step->wait_deadline =
          std::min(step->wait_deadline, Clock::now() + std::chrono::milliseconds(std::min<uint64_t>(
                                                           h.timeout_ms(), rpc::kMaxWaitMs)));
    *out = step;
    if (step->complete()) changed_.notify_all();  // count == 0: joining is all there is
    return std::nullopt;
  }

  // Takes rank's piece k (swapping the bytes out of the message) and folds every piece of
  // index k whose predecessors are in, in rank order.
  std::optional<Failure> accept(const std::shared_ptr<Step>& step, int rank, size_t k,
                                size_t received, std::string* data) {
    if (k >= step->chunks || data->size() != step->pieceBytes(k))
      return fail(step,
                  {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "rank " + std::to_string(rank) + " sent a piece of " +
                                    std::to_string(data->size()) + " bytes at offset " +
                                    std::to_string(received) + "; expected " +
                                    std::to_string(k < step->chunks ? step->pieceBytes(k) : 0)),
                   rank});
    base::MutexLock lock(mutex_);
    if (step->failure) return step->failure;
    step->early[k][rank].swap(*data);
    if (step->busy[k]) return std::nullopt;  // its folder will pick this piece up
    step->busy[k] = 1;
    char* dst = step->result.get() + k * ParameterServer::kChunkBytes;
    const size_t count = step->pieceBytes(k) / elementSize(step->dtype);
    for (;;) {
      auto it = step->early[k].find(step->next_rank[k]);
      if (step->failure || it == step->early[k].end()) break;
      const int next = it->first;
      std::string piece = std::move(it->second);
      step->early[k].erase(it);
      lock.unlock();
      if (next == 0) {
        std::memcpy(dst, piece.data(), piece.size());
      } else {
        reduceInto(dst, piece.data(), count, step->dtype, step->op);
      }
      const bool last = next + 1 == step->world;
      if (last && step->op == ReduceOp::kAvg) divideBy(dst, count, step->dtype, step->world);
      piece = std::string();  // free before re-locking
      lock.lock();
      step->next_rank[k] = next + 1;
      if (last && ++step->chunks_done == step->chunks && step->complete()) changed_.notify_all();
    }
    step->busy[k] = 0;
    return std::nullopt;
  }

  // Blocks until the step completes or fails, the client goes away, or the earliest waiter's
  // timeout passes (then the step fails naming the ranks that never pushed).
  std::optional<Failure> awaitResult(grpc::ServerContext& context,
                                     const std::shared_ptr<Step>& step, int rank) {
    base::MutexLock lock(mutex_);
    step->pushed[rank] = 1;
    while (!step->complete()) {
      if (step->failure) return step->failure;
      if (context.IsCancelled())
        return Failure{grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled")};
      const auto now = Clock::now();
      if (now >= step->wait_deadline) {
        std::string missing;
        for (int r = 0; r < step->world; ++r)
          if (!step->pushed[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        int blame = -1;
        for (int r = 0; r < step->world && blame < 0; ++r)
          if (!step->pushed[r]) blame = r;
        return failLocked(step, {grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                              stepName(step->key) + ": rank(s) " + missing +
                                                  " did not push before the timeout"),
                                 blame});
      }
      changed_.wait_until(lock, std::min(step->wait_deadline, now + kStepPollInterval));
    }
    if (step->failure) return step->failure;
    return std::nullopt;
  }

  void leave(const std::shared_ptr<Step>& step, int rank) {
    base::MutexLock lock(mutex_);
    ++step->left;
    if (!step->complete() && !step->failure)
      failLocked(step,
                 {grpc::Status(grpc::StatusCode::ABORTED, "rank " + std::to_string(rank) +
                                                              " left before every rank had pushed"),
                  rank});
    if (step->left == step->joined_count && step->complete()) {
      auto it = steps_.find(step->key);
      if (it != steps_.end() && it->second == step) steps_.erase(it);
    }
  }

  Failure fail(const std::shared_ptr<Step>& step, Failure failure) {
    base::MutexLock lock(mutex_);
    return failLocked(step, std::move(failure));
  }

  // The first failure wins; the step is forgotten at once
  // (handlers still hold it) and remembered for late ranks. `step` is taken by value: callers
  // may pass the map's own shared_ptr (shutdown, join's `invalid`), which the erase below
  // destroys, and the step must outlive the erase for remember(step->key).
  Failure failLocked(std::shared_ptr<Step> step, Failure failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (step->failure) return *step->failure;
    step->failure = failure;
    for (auto& pieces : step->early) pieces.clear();
    auto it = steps_.find(step->key);
    if (it != steps_.end() && it->second == step) steps_.erase(it);
    remember(step->key, failure);
    changed_.notify_all();
    return failure;
  }

  void remember(const StepKey& key, const Failure& failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (remembered_.emplace(key, failure).second) remembered_order_.push_back(key);
    while (remembered_order_.size() > kMaxRemembered) {
      remembered_.erase(remembered_order_.front());
      remembered_order_.pop_front();
    }
  }

  // A newer generation means the group restarted: steps of
  // older generations can never complete.
  void supersede(uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    generation_ = generation;
    std::vector<std::shared_ptr<Step>> stale;
    for (const auto& [key, step] : steps_)
      if (key.first < generation) stale.push_back(step);
    for (const auto& step : stale)
      failLocked(step, {grpc::Status(grpc::StatusCode::ABORTED, stepName(step->key) +
                                                                    " superseded by generation " +
                                                                    std::to_string(generation))});
  }

  const std::string token_;
  const int world_;
  base::Mutex mutex_;
  base::CondVar changed_;
  std::map<StepKey, std::shared_ptr<Step>> steps_ ABSL_GUARDED_BY(mutex_);
  std::map<StepKey, Failure> remembered_ ABSL_GUARDED_BY(mutex_);
  std::deque<StepKey> remembered_order_ ABSL_GUARDED_BY(mutex_);
  uint64_t generation_ ABSL_GUARDED_BY(mutex_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mutex_) = false;
};

std::unique_ptr<PushPullHandler> makeParameterServerService(const std::string& token, int world) {
  return std::make_unique<ParameterServerService>(token, world);
}

ParameterServer::ParameterServer(const std::string& host, int port, const std::string& token,
                                 int world)
    : host_(host.empty() ? "127.0.0.1" : host), world_(world) {
  if (world < 1)
    throw std::invalid_argument("parameter server world size must be ≥ 1, got " +
                                std::to_string(world));
  service_ = std::make_unique<ParameterServerService>(token, world);
  server_ = rpc::startServer("parameter server", host_, port, service_.get(),
                             static_cast<int>(kChunkBytes + rpc::kMessageSlackBytes), &port_);
}

ParameterServer::~ParameterServer() { shutdown(); }

ParameterServer::StepProgress ParameterServer::progress(uint64_t generation, uint64_t seq) const {
  return service_->progress({generation, seq});
}

void ParameterServer::shutdown() {
  base::MutexLock lock(shutdown_mutex_);
  if (!server_) return;
  service_->shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
}

}  // namespace cumulus::comm
