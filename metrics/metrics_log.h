#pragma once
// metrics.jsonl: one JSON object per line, flushed line by line so that a crashed or preempted
// run keeps every record written before it stopped. No LibTorch here.
//
// Records the trainer writes (see trainer.h for when):
//   {"type":"train","step":S,"epoch":E,"loss":L,"lr":R,"samples_per_sec":X,"step_time_ms":T}
//   {"type":"eval","step":S,"epoch":E,"test_loss":L,"test_accuracy":A}
//   {"type":"summary",...}
//   (test_accuracy only where the loss has one: class ids and tokens, not mse or module)
//   {"type":"resume","step":S,"world_size":W}   where a resumed launch takes over the file
//   {"type":"first_step","step":S,"seconds_since_exec":T}   each launch's first step
//   {"type":"checkpoint","step":S,"stall_ms":X,"path":P}    a checkpoint committed; X is the
//                                                            training thread's pause for it
//   {"type":"preempted","step":S,"checkpoint":P}           the agreed stop after S steps
//   {"type":"trained","step":S,"steps":K,"seconds":T}      the launch's loop ran K steps to S
//   {"type":"goodput","step":S,"wall_s":W,"startup_s":…,"training_s":…,"comm_wait_s":…,
//    "evaluation_s":…,"checkpoint_s":…,"reform_s":…,"restart_s":…,"redone_s":…,"other_s":…,
//    "productive_ratio":P}   where the run's wall time went so far (goodput.h), after each
//                            checkpoint record and each trained record
//   {"type":"balance","reason":R,"step":S,"shares":[..],"rates":[..],"predicted_speedup":X}
//        the ranks' shares of the global batch from step S+1 on (trainer.balance; R is "start",
//        "auto" or "reform"; rates are samples/s of compute per rank, for "auto" only)
// Every record also gets "time" last: when it was written, in seconds since the Unix epoch (the
// wall clock, so that another process, such as cumulus-spot, can tell which launch wrote it).
// Records are nlohmann::ordered_json objects, so the keys keep the order they are written in.
// Non-finite numbers are written as null (JSON has no NaN). This file, not the console, is the
// interface for programs that follow a run.

#include <cstdint>
#include <fstream>
#include <functional>
#include <ios>
#include <string>

#include <nlohmann/json.hpp>

namespace cumulus::metrics {

class MetricsLog {
 public:
  // Seconds since the Unix epoch; empty: std::chrono::system_clock.
  using WallClock = std::function<double()>;

  // Truncates `path`. Throws std::runtime_error naming the path if it cannot be opened, UserError
  // if it is there and not a regular file (a FIFO would block the open).
  explicit MetricsLog(const std::string& path, WallClock clock = {});
  // A launch that resumed after `step` completed steps continues the file of the launches before
  // it, so one metrics.jsonl tells the whole run: records of steps <= `step` are kept, records of
  // later steps (run again from the checkpoint), records without a step, summaries and a line that
  // is not a JSON object (the torn last line of a killed writer) are dropped. The file is
  // rewritten to a temporary name and renamed, then appended to. Throws std::runtime_error
  // naming the path on an I/O error, UserError if it is there and not a regular file.
  static MetricsLog continueAfter(const std::string& path, int64_t step, WallClock clock = {});
  // Appends the record, stamped with "time", as one line and flushes; returns it as written.
  // Throws std::runtime_error naming the path on a write error.
  nlohmann::ordered_json write(const nlohmann::ordered_json& record);

 private:
  MetricsLog(const std::string& path, std::ios::openmode mode, WallClock clock);
  std::string path_;
  WallClock clock_;
  std::ofstream out_;
};

}  // namespace cumulus::metrics
