#include "launch/run_report.h"

#include <algorithm>
#include <utility>

#include "base/command_line.h"
#include "base/line_reader.h"
#include "base/regular_file.h"
#include "launch/job_metrics.h"

namespace cumulus::launch {
namespace {

// The state a finished run's records tell.
std::string stateOf(const nlohmann::json& last_end) {
  if (last_end.is_null()) return "stopped";
  const nlohmann::json& type = last_end["type"];
  return type == "summary" ? "finished" : type == "preempted" ? "preempted" : "stopped";
}

base::Fd openMetrics(const std::string& path) {
  std::string problem;
  base::Fd fd = base::openRegularFile(path, problem);
  if (fd.valid()) return fd;
  if (problem == base::kNotFound) {
    throw base::UsageError(path +
                           ": cannot read it; RUN_DIR is the trainer.run_dir of a run (it holds "
                           "metrics.jsonl)");
  }
  throw base::UsageError(path + ": " + problem);
}

// A writer killed mid-line leaves the start of a record and no newline: not a sign of another
// kind of file.
bool tornRecord(const base::Line& line) { return !line.ended && line.text.rfind('{', 0) == 0; }

}  // namespace

RecordSelection::RecordSelection(size_t per_type) : per_type_(std::max<size_t>(per_type, 1)) {}

RecordSelection::Thinned& RecordSelection::bucketOf(const nlohmann::json& record) {
  const auto type = record.find("type");
  std::string key = type != record.end() && type->is_string() ? type->get<std::string>() : "";
  if (types_.size() >= kMaxTypes && types_.count(key) == 0) key = "";
  return types_[key];
}

void RecordSelection::add(int64_t index, nlohmann::json record) {
  Thinned& t = bucketOf(record);
  const int64_t ordinal = t.seen++;
  Kept kept{ordinal, index, std::move(record)};
  if (ordinal % t.stride != 0) {
    t.newest = std::move(kept);
    return;
  }
  t.newest.reset();
  t.kept.push_back(std::move(kept));
  if (t.kept.size() <= per_type_) return;
  // Keep every other one: the ordinals left are the multiples of the doubled stride. The record
  // just added, when it goes, stays as the newest.
  Kept last = std::move(t.kept.back());
  t.kept.pop_back();
  t.stride *= 2;
  const int64_t stride = t.stride;
  t.kept.erase(std::remove_if(t.kept.begin(), t.kept.end(),
                              [stride](const Kept& k) { return k.ordinal % stride != 0; }),
               t.kept.end());
  if (last.ordinal % stride == 0) {
    t.kept.push_back(std::move(last));
  } else {
    t.newest = std::move(last);
  }
}

size_t RecordSelection::size() const {
  size_t n = 0;
  for (const auto& [type, t] : types_) n += t.kept.size() + (t.newest ? 1 : 0);
  return n;
}

nlohmann::json RecordSelection::take() {
  std::vector<Kept> all;
  all.reserve(size());
  for (auto& [type, t] : types_) {
    for (Kept& k : t.kept) all.push_back(std::move(k));
    if (t.newest) all.push_back(std::move(*t.newest));
  }
  types_.clear();
  std::sort(all.begin(), all.end(), [](const Kept& a, const Kept& b) { return a.index < b.index; });
  nlohmann::json records = nlohmann::json::array();
  for (Kept& k : all) records.push_back(std::move(k.record));
  return records;
}

RunReport readRunReport(const std::string& run_dir, size_t per_type) {
  const std::string path = run_dir + "/metrics.jsonl";
  base::LineReader lines(openMetrics(path), path);
  JobMetrics metrics(run_dir);
  RecordSelection selection(per_type);
  RunReport report;
  nlohmann::json last_end;
  int64_t first_bad = 0;  // the first line that is neither a record nor a torn last one
  for (base::Line line; lines.next(line);) {
    nlohmann::json record =
        line.cut ? nlohmann::json() : nlohmann::json::parse(line.text, nullptr, false);
    if (!record.is_object()) {
      ++report.skipped;
      if (first_bad == 0 && !tornRecord(line)) first_bad = line.number;
      continue;
    }
    ++report.records_read;
    const auto type = record.find("type");
    if (type != record.end() && (*type == "summary" || *type == "preempted" || *type == "resume")) {
      last_end = record;
    }
    metrics.foldRecord(record);
    selection.add(line.number, std::move(record));
  }
  if (report.records_read == 0 && first_bad > 0) {
    throw base::UsageError(path + ": not a metrics.jsonl: line " + std::to_string(first_bad) +
                           " is not a JSON record (a run's metrics.jsonl holds one JSON object "
                           "a line)");
  }
  if (report.records_read == 0) throw base::UsageError(path + ": no record in it yet");
  metrics.setState(stateOf(last_end));
  report.status = metrics.status();
  report.status.erase("last_checkpoint");  // its age is the live page's; a report has no "now"
  report.records = selection.take();
  return report;
}

}  // namespace cumulus::launch
