#pragma once
// TensorBoard event files: RUN_DIR/tensorboard/events.out.tfevents.<seconds>.<host>.<pid>.<n>,
// which `tensorboard --logdir RUN_DIR` plots as it would TensorFlow's or PyTorch's. No LibTorch.
//
// The format is TensorBoard's own: a sequence of TFRecords, each
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   `length` bytes of a serialized Event | uint32 masked CRC-32C of those bytes
// (base/crc32c.h for the mask), the Event being proto/tensorboard_event.proto, wire-compatible
// with TensorBoard's. The first record holds file_version "brain.Event:2"; each later one holds
// one scalar (a Summary of one simple_value, a float32).
//
// Every record goes to the kernel as it is written (one write(2) each), so a killed run keeps all
// the records written before it died; a torn last record is what TensorBoard's reader expects of
// a live file and skips. Every I/O error throws std::runtime_error naming the path and the cause.
// Not thread-safe: one writer per thread (or a lock around it).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/fd.h"
#include "metrics/recorder.h"

namespace cumulus::metrics {

class TensorBoardWriter {
 public:
  // Seconds since the Unix epoch; empty: std::chrono::system_clock.
  using WallClock = std::function<double()>;

  // Creates `dir` (with its parents) if missing, then a new events file in it, and writes the
  // version record. The file name's counter keeps two writers of one process (same second, host
  // and pid) apart. Throws std::runtime_error naming the directory or the file, and the cause.
  explicit TensorBoardWriter(const std::string& dir, WallClock clock = {});

  // One scalar at `step`, stamped with the clock's time, or with `wall_time` (seconds since the
  // Unix epoch). The value is stored as a float32, as TensorBoard's scalars are.
  void scalar(const std::string& tag, int64_t step, double value);
  void scalar(const std::string& tag, int64_t step, double value, double wall_time);
  // Several scalars of one step in one event (one record, one write), as a record's values go.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
               double wall_time);
  // Makes what was written durable (fdatasync). Records already reach the kernel one by one; this
  // is for a caller that must survive a power loss, such as at the end of a run.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void writeRecord(const std::string& event);
  std::string path_;
  WallClock clock_;
  base::Fd fd_;
};

// Turns metrics.jsonl records (metrics/metrics_log.h) into scalars:
//   "train"      -> train/loss, train/lr, train/samples_per_sec, train/step_time_ms,
//                   train/comm_wait_ms, train/comm_bytes_sent, and train/outer_rounds,
//                   train/outer_wait_s where the record has them
//   "eval"       -> eval/test_loss, eval/test_accuracy
//   "goodput"    -> goodput/<key> for every numeric key but "step" and "time"
//   "checkpoint" -> checkpoint/stall_ms
//   "scalar"     -> the record's "name" (a series of the program's own, Recorder::scalar)
// each at the record's "step"; other types, and records without an integer step, are ignored.
// A missing key, or a null (a non-finite number in metrics.jsonl), writes nothing for it. The
// record's "time", where present, is the events' wall time, so the two files agree.
// The writer must outlive the sink.
class TensorBoardSink {
 public:
  explicit TensorBoardSink(TensorBoardWriter& writer) : writer_(writer) {}

  // Throws what the writer throws.
  void write(const nlohmann::ordered_json& record);

 private:
  TensorBoardWriter& writer_;
};

// The trainer's RecordSink (metrics_recorder.h): the writing rank's records, as scalars, in a new
// events file under `dir`, made at the first record (so that nothing is created in a run
// directory before the run holds it). Throws what the writer throws.
class TensorBoardRecords final : public RecordSink {
 public:
  explicit TensorBoardRecords(std::string dir) : dir_(std::move(dir)) {}
  void record(const nlohmann::ordered_json& record) override;
  bool takesStatus() const override { return false; }

 private:
  std::string dir_;
  std::unique_ptr<TensorBoardWriter> writer_;
  std::unique_ptr<TensorBoardSink> sink_;
};

}  // namespace cumulus::metrics
