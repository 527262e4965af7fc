#include "distributed/trace.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace cumulus::distributed {
namespace {

int64_t micros(TraceRecorder::Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

TraceRecorder::TraceRecorder(int pid, size_t max_events)
    : pid_(pid), max_events_(max_events), origin_(Clock::now()) {}

void TraceRecorder::record(const std::string& name, int tid, Clock::time_point start,
                           Clock::time_point end, nlohmann::ordered_json args) {
  Event event{name, tid, micros(start - origin_), std::max<int64_t>(0, micros(end - start)),
              std::move(args)};
  base::MutexLock lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

std::string TraceRecorder::json() const {
  base::MutexLock lock(mutex_);
  // One event per line, so that a person can still read and diff the file.
  const auto line = [](const nlohmann::ordered_json& event) {
    return event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  // Name the lanes so the viewer shows "rank 1 / compute" rather than bare numbers.
  const auto lane = [&](const char* kind, int tid, const std::string& name) {
    return line(
        {{"name", kind}, {"ph", "M"}, {"pid", pid_}, {"tid", tid}, {"args", {{"name", name}}}});
  };
  std::string out = "{\"traceEvents\":[";
  out += "\n" + lane("process_name", 0, "rank " + std::to_string(pid_));
  out += ",\n" + lane("thread_name", kComputeTid, "compute");
  out += ",\n" + lane("thread_name", kCommTid, "comm");
  for (const Event& e : events_) {
    nlohmann::ordered_json event{{"ph", "X"},     {"pid", pid_},     {"tid", e.tid},
                                 {"ts", e.ts_us}, {"dur", e.dur_us}, {"name", e.name}};
    if (!e.args.is_null()) event["args"] = e.args;
    out += ",\n" + line(event);
  }
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out;
}

void TraceRecorder::write(const std::string& path) const {
  const std::string text = json();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::trunc | std::ios::binary);
    file << text;
    file.flush();
    if (!file) throw std::runtime_error(path + ": cannot write the trace");
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) throw std::runtime_error(path + ": cannot write the trace: " + error.message());
}

size_t TraceRecorder::size() const {
  base::MutexLock lock(mutex_);
  return events_.size();
}

size_t TraceRecorder::dropped() const {
  base::MutexLock lock(mutex_);
  return dropped_;
}

}  // namespace cumulus::distributed
