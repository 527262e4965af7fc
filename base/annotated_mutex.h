#pragma once
// Mutex, MutexLock and CondVar: std::mutex, std::unique_lock and std::condition_variable with
// Clang's thread-safety annotations, so that `-Wthread-safety` (make thread-safety) checks the
// lock discipline written as ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED. libstdc++'s own
// types carry no annotations, so the analysis cannot see them lock anything.
//
// Header-only, no library to link: the macros come from Abseil's header, and the types compile to
// exactly the std ones (same futex, same cost, and ThreadSanitizer sees them, which it does not
// for absl::Mutex from Debian, an uninstrumented library).
//
// Thread-safety: as the std types they wrap.
//
// A predicate passed to CondVar::wait* runs with the mutex held; the analysis checks a lambda
// body on its own, so a predicate that reads guarded members says so:
//   changed_.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return done_; });

#include <absl/base/thread_annotations.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace cumulus::base {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mutex_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mutex_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mutex_;
};

// Holds the mutex from construction to destruction, or between unlock() and lock() calls.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) ABSL_EXCLUSIVE_LOCK_FUNCTION(mutex) : lock_(mutex.mutex_) {}
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { lock_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { lock_.unlock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// std::condition_variable over a MutexLock. The lock is held again when a wait returns.
class CondVar {
 public:
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

  template <class Predicate>
  void wait(MutexLock& lock, Predicate ready) {
    cv_.wait(lock.lock_, std::move(ready));
  }
  // False if `ready` is still false at the deadline.
  template <class Clock, class Duration, class Predicate>
  bool wait_until(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline,
                  Predicate ready) {
    return cv_.wait_until(lock.lock_, deadline, std::move(ready));
  }
  template <class Rep, class Period, class Predicate>
  bool wait_for(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout,
                Predicate ready) {
    return cv_.wait_for(lock.lock_, timeout, std::move(ready));
  }
  // Without a predicate: may return early (spuriously); the caller loops on its condition.
  template <class Clock, class Duration>
  std::cv_status wait_until(MutexLock& lock,
                            const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv_.wait_until(lock.lock_, deadline);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace cumulus::base
