#pragma once
// What cumulus-report puts in a run's page: RUN_DIR/metrics.jsonl read line by line, in memory
// bounded by the page and not by the file (a long run writes hundreds of megabytes of records).
// Every record goes through JobMetrics, so the status and counts are the whole run's; the page
// gets at most `per_type` records of each type: the first, the newest, and evenly spaced ones
// between (a plot of 4096 points shows a run as well as one of a million, and a browser opens it).
//
// A record is a line that is a JSON object. Other lines (a killed run's torn line, even in the
// middle of the file after a relaunch appended to it) are skipped and counted, as long as the file
// holds at least one record. Errors (base::UsageError, exit code 2), each naming the path:
//   "<path>: cannot read it; RUN_DIR is the trainer.run_dir of a run (it holds metrics.jsonl)"
//   "<path>: is a FIFO, not a regular file" (or a directory, a device: nothing is waited for)
//   "<path>: no record in it yet"   (an empty file, or only the torn start of a first record)
//   "<path>: not a metrics.jsonl: line N is not a JSON record (...)"   (no line is a record)
// Blocks on the file's reads alone. Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cumulus::launch {

// At most `per_type` records of each type (its "type" string; records without one, and types past
// the first kMaxTypes, share one bucket), thinned as they come: every stride-th record of a type
// from its first on, the stride doubling whenever more than `per_type` are kept, and the newest.
class RecordSelection {
 public:
  static constexpr size_t kMaxTypes = 64;

  explicit RecordSelection(size_t per_type);

  // `index` orders records across types (the line number).
  void add(int64_t index, nlohmann::json record);
  // The kept records in index order; the selection is empty afterwards.
  nlohmann::json take();
  size_t size() const;

 private:
  struct Kept {
    int64_t ordinal = 0;  // among the records of its type
    int64_t index = 0;
    nlohmann::json record;
  };
  struct Thinned {
    int64_t stride = 1;
    int64_t seen = 0;
    std::vector<Kept> kept;      // ordinals that are multiples of stride
    std::optional<Kept> newest;  // the newest record, when it is not the last of `kept`
  };
  Thinned& bucketOf(const nlohmann::json& record);

  size_t per_type_;
  std::map<std::string, Thinned> types_;
};

struct RunReport {
  nlohmann::json records;  // the page's selection, in file order
  nlohmann::json status;   // JobMetrics::status() of every record, without last_checkpoint
  int64_t records_read = 0;
  int64_t skipped = 0;  // lines that are not records
};

RunReport readRunReport(const std::string& run_dir, size_t per_type = 4096);

}  // namespace cumulus::launch
