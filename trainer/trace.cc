#include "trainer/trace.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "configs/json.h"

namespace cumulus::trainer {
namespace {

int64_t micros(TraceRecorder::Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

TraceRecorder::TraceRecorder(int pid, size_t max_events)
    : pid_(pid), max_events_(max_events), origin_(Clock::now()) {}

void TraceRecorder::record(const std::string& name, int tid, Clock::time_point start,
                           Clock::time_point end, const std::string& args) {
  Event event{name, tid, micros(start - origin_), std::max<int64_t>(0, micros(end - start)), args};
  base::MutexLock lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

std::string TraceRecorder::json() const {
  base::MutexLock lock(mutex_);
  std::string out = "{\"traceEvents\":[";
  // Name the lanes so the viewer shows "rank 1 / compute" rather than bare numbers.
  char meta[256];
  std::snprintf(meta, sizeof(meta),
                "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"rank %d\"}},"
                "\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"name\":\"compute\"}},"
                "\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"name\":\"comm\"}}",
                pid_, pid_, pid_, kComputeTid, pid_, kCommTid);
  out += meta;
  for (const Event& e : events_) {
    char head[160];
    std::snprintf(head, sizeof(head),
                  ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%lld,\"dur\":%lld,", pid_, e.tid,
                  static_cast<long long>(e.ts_us), static_cast<long long>(e.dur_us));
    out += head;
    out += "\"name\":" + configs::jsonQuote(e.name);
    if (!e.args.empty()) out += ",\"args\":{" + e.args + "}";
    out += "}";
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

}  // namespace cumulus::trainer
