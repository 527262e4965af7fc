#pragma once
// A Chrome trace recorder (the "Trace Event Format" that chrome://tracing and Perfetto open):
//   {"traceEvents":[{"name":"backward","ph":"X","ts":12,"dur":340,"pid":0,"tid":0}, …]}
// Complete ("X") events only, timestamps in microseconds since the recorder was made, pid = the
// rank, so the files of several ranks can be concatenated into one view.
//
// Conventional threads: kComputeTid (forward, backward, optimizer on the training thread) and
// kCommTid (one event per bucket all-reduce, from launch to completion); tids are labels, not OS
// threads.
//
// Thread-safe: record() may be called from any thread; write() snapshots under the lock.
// No LibTorch.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/annotated_mutex.h"

namespace cumulus::distributed {

class TraceRecorder {
 public:
  static constexpr int kComputeTid = 0;
  static constexpr int kCommTid = 1;
  using Clock = std::chrono::steady_clock;

  explicit TraceRecorder(int pid, size_t max_events = 1000000);

  // A span [start, end) on `tid`. `args` is a JSON object ({"bytes": 1024}) or null for none.
  // Events beyond max_events are dropped (and counted), so a long run cannot exhaust memory.
  void record(const std::string& name, int tid, Clock::time_point start, Clock::time_point end,
              nlohmann::ordered_json args = nullptr);
  // The whole trace as JSON.
  std::string json() const;
  // Writes json() to `path` (through a temporary file and a rename). Throws std::runtime_error
  // naming the path on failure.
  void write(const std::string& path) const;
  size_t size() const;
  size_t dropped() const;

  // Records [construction, destruction) of the scope; `recorder` may be null (tracing off).
  class Span {
   public:
    Span(TraceRecorder* recorder, std::string name, int tid = kComputeTid)
        : recorder_(recorder), name_(std::move(name)), tid_(tid), start_(Clock::now()) {}
    ~Span() {
      if (recorder_ != nullptr) recorder_->record(name_, tid_, start_, Clock::now());
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    TraceRecorder* recorder_;
    std::string name_;
    int tid_;
    Clock::time_point start_;
  };

 private:
  struct Event {
    std::string name;
    int tid;
    int64_t ts_us;
    int64_t dur_us;
    nlohmann::ordered_json args;
  };

  const int pid_;
  const size_t max_events_;
  const Clock::time_point origin_;
  mutable base::Mutex mutex_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mutex_);
  size_t dropped_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace cumulus::distributed
