#pragma once
// Work: the handle of an asynchronous collective (as c10d's Work).
//
// Thread-safety: all methods may be called from any thread, concurrently.

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

#include "base/annotated_mutex.h"

namespace cumulus::comm {

class Work {
 public:
  // Waiting "forever" is still bounded: every operation ends by its own timeout.
  static constexpr std::chrono::milliseconds kUntilDone = std::chrono::milliseconds::max();

  Work(std::string op, uint64_t seq) : op_(std::move(op)), seq_(seq) {}

  // Blocks until the operation finished. Rethrows its error (a CommError) if it failed. If it is
  // still running after `timeout`, throws CommError(kTimeout) naming op and seq (peer −1); the
  // operation keeps running and may be waited for again.
  void wait(std::chrono::milliseconds timeout = kUntilDone);
  // True once the operation finished, successfully or not. Never blocks.
  bool isCompleted() const;
  // The operation's error once it failed; null while running or after success. Never blocks.
  std::exception_ptr exception() const;

  const std::string& op() const { return op_; }
  uint64_t seq() const { return seq_; }

  // Called once by the communicator's executor.
  void finish(std::exception_ptr error);

 private:
  const std::string op_;
  const uint64_t seq_;
  mutable base::Mutex mutex_;
  base::CondVar done_;
  bool completed_ ABSL_GUARDED_BY(mutex_) = false;
  std::exception_ptr error_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace cumulus::comm
