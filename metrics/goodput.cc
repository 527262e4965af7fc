#include "metrics/goodput.h"

#include <algorithm>
#include <utility>

#include "base/line_reader.h"
#include "base/regular_file.h"
#include "cumulus/errors.h"

namespace cumulus::metrics {
namespace {

// The categories in the order records list them, with their members.
struct Category {
  const char* name;
  double GoodputSplit::*seconds;
};
constexpr Category kCategories[] = {
    {"wall_s", &GoodputSplit::wall_s},
    {"startup_s", &GoodputSplit::startup_s},
    {"training_s", &GoodputSplit::training_s},
    {"comm_wait_s", &GoodputSplit::comm_wait_s},
    {"evaluation_s", &GoodputSplit::evaluation_s},
    {"checkpoint_s", &GoodputSplit::checkpoint_s},
    {"reform_s", &GoodputSplit::reform_s},
    {"restart_s", &GoodputSplit::restart_s},
    {"redone_s", &GoodputSplit::redone_s},
    {"other_s", &GoodputSplit::other_s},
};

double number(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

double GoodputSplit::productiveRatio() const {
  return wall_s > 0 ? std::min(1.0, (training_s + comm_wait_s) / wall_s) : 0.0;
}

nlohmann::ordered_json GoodputSplit::toJson() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const Category& c : kCategories) out[c.name] = this->*c.seconds;
  out["productive_ratio"] = productiveRatio();
  return out;
}

GoodputSplit GoodputSplit::fromJson(const nlohmann::json& record) {
  GoodputSplit split;
  for (const Category& c : kCategories) split.*c.seconds = number(record, c.name);
  return split;
}

GoodputHistory readGoodputHistory(const std::string& metrics_path, int64_t step) {
  GoodputHistory history;
  std::string problem;
  base::Fd fd = base::openRegularFile(metrics_path, problem);  // a FIFO would block the resume
  if (!fd.valid()) {
    if (problem == base::kNotFound) return history;
    throw UserError(metrics_path + ": " + problem);
  }
  base::LineReader lines(std::move(fd), metrics_path);
  for (base::Line line; lines.next(line);) {
    // No exceptions: the torn last line of a killed writer is skipped.
    const nlohmann::json record =
        line.cut ? nlohmann::json() : nlohmann::json::parse(line.text, nullptr, false);
    if (!record.is_object()) continue;
    const double time = number(record, "time");
    if (time > 0) history.last_time = std::max(history.last_time, time);
    const auto type = record.find("type");
    const auto s = record.find("step");
    if (type == record.end() || *type != "goodput" || s == record.end() ||
        !s->is_number_integer() || s->get<int64_t>() > step) {
      continue;
    }
    history.base = GoodputSplit::fromJson(record);
    history.base_time = time;
  }
  return history;
}

void GoodputAccount::start(double exec_time, const GoodputHistory& history) {
  if (started_) return;
  started_ = true;
  run_start_ = exec_time;
  exec_time_ = exec_time;
  if (!history.base) return;
  now_ = *history.base;
  run_start_ = history.base_time - history.base->wall_s;
  if (history.last_time > history.base_time) now_.redone_s += history.last_time - history.base_time;
  const double since = std::max(history.base_time, history.last_time);
  if (exec_time > since) now_.restart_s += exec_time - since;
}

void GoodputAccount::firstStep(double time) {
  if (first_step_seen_) return;
  first_step_seen_ = true;
  now_.startup_s += std::max(0.0, time - exec_time_);
}

void GoodputAccount::step(double seconds, double comm_wait_seconds) {
  now_.training_s += std::max(0.0, seconds - comm_wait_seconds);
  now_.comm_wait_s += comm_wait_seconds;
}

GoodputSplit GoodputAccount::at(double time) const {
  GoodputSplit split = now_;
  split.wall_s = std::max(0.0, time - run_start_);
  const double counted = split.startup_s + split.training_s + split.comm_wait_s +
                         split.evaluation_s + split.checkpoint_s + split.reform_s +
                         split.restart_s + split.redone_s;
  split.other_s = std::max(0.0, split.wall_s - counted);
  return split;
}

}  // namespace cumulus::metrics
