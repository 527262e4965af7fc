// The backend's point-to-point calls (send, recv, recv from any source) and Gloo's monitored
// barrier on them: posted at once on the group's point-to-point lanes, apart from the queue.

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "cumulus/errors.h"
#include "cumulus/process_group.h"
#include "python/backend.h"
#include "python/backend_tensors.h"

namespace cumulus::python {
namespace {

// A send's or receive's Work. It completes when the Cumulus Work does, on the group's
// point-to-point thread, not through the backend's queue; wait() surfaces its error.
class PointToPointWork final : public c10d::Work {
 public:
  // `peer`: the rank sent to or received from; ProcessGroup::kAnySource (−1) for any.
  PointToPointWork(int rank, c10d::OpType type, const char* title, int peer,
                   std::unique_ptr<cumulus::Work> work, std::vector<at::Tensor> tensors)
      : c10d::Work(rank, type, title),
        peer_(peer),
        work_(std::move(work)),
        tensors_(std::move(tensors)) {}

  bool isCompleted() override { return work_->isCompleted(); }
  bool isSuccess() const override { return work_->isCompleted() && !collect(); }
  std::exception_ptr exception() const override {
    return work_->isCompleted() ? collect() : nullptr;
  }
  int sourceRank() const override { return work_->source(); }
  std::vector<at::Tensor> result() override { return tensors_; }
  // Without a timeout (kNoTimeout, 0), bounded by the send's or receive's own deadline (the
  // group's timeout). With one, a send or receive still running after it throws CommError
  // (kTimeout) and goes on: a later wait() may still complete it.
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout != ::kNoTimeout) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!collected_) {
        try {
          work_->wait(timeout);
          collected_ = true;
        } catch (const CommError& e) {
          if (!work_->isCompleted()) {
            throw CommError(e.kind(), e.op(), e.seq(), peer_,
                            "not finished after waiting " + std::to_string(timeout.count()) +
                                " ms; it goes on, and a later wait() may complete it");
          }
          collected_ = true;
          error_ = std::current_exception();
        }
      }
    }
    if (std::exception_ptr error = collect()) std::rethrow_exception(error);
    return true;
  }

 private:
  // Waits once for the Cumulus Work (which copies into a non-contiguous tensor), keeping its error.
  std::exception_ptr collect() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!collected_) {
      collected_ = true;
      try {
        work_->wait();
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    return error_;
  }

  const int peer_;
  std::unique_ptr<cumulus::Work> work_;
  std::vector<at::Tensor> tensors_;
  mutable std::mutex mutex_;
  mutable bool collected_ = false;
  mutable std::exception_ptr error_;
};

// Tags below 0 are the backend's own (monitoredBarrier's), as Gloo refuses them.
void checkTag(const char* op, int tag) {
  if (tag < 0) refuse(std::string(op) + ": tag " + std::to_string(tag) + " must be nonnegative");
}

}  // namespace

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& tensors, int dstRank,
                                             int tag) {
  checkTag("send", tag);
  const at::Tensor& tensor = theOne("send", tensors, checkMovable);
  return c10::make_intrusive<PointToPointWork>(
      rank_, c10d::OpType::SEND, "cumulus:send", dstRank,
      group_->sendAsync(tensor, dstRank, tag, callOptions(std::chrono::milliseconds(0))), tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                             int tag) {
  checkTag("recv", tag);
  at::Tensor tensor = theOne("recv", tensors, checkMovable);
  return c10::make_intrusive<PointToPointWork>(
      rank_, c10d::OpType::RECV, "cumulus:recv", srcRank,
      group_->recvAsync(tensor, srcRank, tag, callOptions(std::chrono::milliseconds(0))), tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  checkTag("recv", tag);
  at::Tensor tensor = theOne("recv", tensors, checkMovable);
  return c10::make_intrusive<PointToPointWork>(
      rank_, c10d::OpType::RECVANYSOURCE, "cumulus:recv_anysource", ProcessGroup::kAnySource,
      group_->recvAsync(tensor, ProcessGroup::kAnySource, tag,
                        callOptions(std::chrono::milliseconds(0))),
      tensors);
}

void Backend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  if (size_ == 1) return;
  using std::chrono::milliseconds;
  const uint64_t seq = ++monitored_barriers_;
  // Every rank counts its calls alike, so one call's messages never match another's (a late
  // rank's token arrives after rank 0 gave up, and is never received).
  const int tag = std::numeric_limits<int>::min() + static_cast<int>(seq % (1u << 30));
  const milliseconds timeout = opts.timeout;
  const std::string limit = std::to_string(timeout.count()) + " ms";
  const auto start = std::chrono::steady_clock::now();
  const auto left = [&] {
    auto spent = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    CollectiveOptions call;
    call.timeout_seconds = std::max<int64_t>(1, (timeout - spent).count()) / 1000.0;
    return call;
  };
  auto fail = [&](int peer, const std::string& what) {
    throw CommError(CommErrorKind::kTimeout, "monitored_barrier", seq, peer, what);
  };
  if (rank_ != 0) {
    at::Tensor token = at::zeros({1}, at::kByte);
    try {
      group_->sendAsync(token, 0, tag, left())->wait();
      group_->recvAsync(token, 0, tag, left())->wait();
    } catch (const std::exception& e) {
      fail(0, "Rank " + std::to_string(rank_) +
                  " successfully reached monitoredBarrier, but received errors while waiting for "
                  "send/recv from rank 0. Please check rank 0 logs for faulty rank. (" +
                  e.what() + ")");
    }
    return;
  }
  // Rank 0 listens for every rank at once and checks them in rank order.
  std::vector<at::Tensor> tokens;
  std::vector<std::unique_ptr<cumulus::Work>> arrivals;
  for (int r = 1; r < size_; ++r) {
    tokens.push_back(at::zeros({1}, at::kByte));
    arrivals.push_back(group_->recvAsync(tokens.back(), r, tag, left()));
  }
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    cumulus::Work& arrival = *arrivals[r - 1];
    if (!waitAllRanks && !arrival.isCompleted() &&
        std::chrono::steady_clock::now() - start >= timeout) {
      std::string passed;
      for (int q = 1; q < r; ++q) passed += (q > 1 ? ", " : "") + std::to_string(q);
      fail(r, "Rank 0 timed out in monitoredBarrier after " + limit +
                  " (ranks that passed: " + (passed.empty() ? "none" : passed) + "; rank " +
                  std::to_string(r) + " and those after it not checked)");
    }
    try {
      arrival.wait();
    } catch (const std::exception&) {
      if (!waitAllRanks) {
        fail(r, "Rank " + std::to_string(r) + " failed to pass monitoredBarrier in " + limit);
      }
      missing.push_back(r);
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (size_t i = 0; i < missing.size(); ++i) {
      ranks += (i > 0 ? ", " : "") + std::to_string(missing[i]);
    }
    // "Ranks" even for one: the wording torch's own tests match for wait_all_ranks.
    fail(missing.front(), "Ranks " + ranks + " failed to pass monitoredBarrier in " + limit);
  }
  std::vector<std::unique_ptr<cumulus::Work>> releases;
  for (int r = 1; r < size_; ++r) {
    releases.push_back(group_->sendAsync(tokens[r - 1], r, tag, left()));
  }
  for (auto& release : releases) release->wait();
}

}  // namespace cumulus::python
