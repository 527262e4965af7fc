#pragma once
// metrics.jsonl: one JSON object per line, flushed line by line so that a crashed or preempted
// run keeps every record written before it stopped. No LibTorch here.
//
// Records the trainer writes (see trainer.h for when):
//   {"type":"train","step":S,"epoch":E,"loss":L,"lr":R,"samples_per_sec":X,"step_time_ms":T}
//   {"type":"eval","step":S,"epoch":E,"test_loss":L,"test_accuracy":A}
//   {"type":"summary",...}
//   {"type":"resume","step":S,"world_size":W}   where a resumed launch takes over the file
// Non-finite numbers are written as null (JSON has no NaN).

#include <cstdint>
#include <fstream>
#include <ios>
#include <string>

#include "configs/json.h"

namespace cumulus::trainer {

// Builds one JSON object. Keys are written in insertion order; the caller keeps them unique.
class JsonLine {
 public:
  JsonLine& add(const std::string& key, const std::string& value);
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonLine& add(const std::string& key, bool value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& key);
  std::string body_;
};

class MetricsLog {
 public:
  // Truncates `path`. Throws std::runtime_error naming the path if it cannot be opened.
  explicit MetricsLog(const std::string& path);
  // A launch that resumed after `step` completed steps continues the file of the launches before
  // it, so one metrics.jsonl tells the whole run: records of steps <= `step` are kept, records of
  // later steps (run again from the checkpoint), summaries and a torn last line (a killed
  // writer) are dropped. The file is rewritten to a temporary name and renamed, then appended
  // to. Throws std::runtime_error naming the path on an I/O error.
  static MetricsLog continueAfter(const std::string& path, int64_t step);
  // Appends the line and flushes. Throws std::runtime_error naming the path on a write error.
  void write(const JsonLine& line);

 private:
  MetricsLog(const std::string& path, std::ios::openmode mode);
  std::string path_;
  std::ofstream out_;
};

}  // namespace cumulus::trainer
