#include "comm/work.h"

#include "comm/error.h"

namespace cumulus::comm {

void Work::wait(std::chrono::milliseconds timeout) {
  base::MutexLock lock(mutex_);
  auto finished = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return completed_; };
  if (timeout == kUntilDone) {
    done_.wait(lock, finished);
  } else if (!done_.wait_for(lock, timeout, finished)) {
    throw CommError(ErrorKind::kTimeout, op_, seq_, -1,
                    "not finished after waiting " + std::to_string(timeout.count()) + " ms");
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::isCompleted() const {
  base::MutexLock lock(mutex_);
  return completed_;
}

std::exception_ptr Work::exception() const {
  base::MutexLock lock(mutex_);
  return error_;
}

void Work::finish(std::exception_ptr error) {
  {
    base::MutexLock lock(mutex_);
    completed_ = true;
    error_ = std::move(error);
  }
  done_.notify_all();
}

}  // namespace cumulus::comm
