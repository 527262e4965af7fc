#include "launch/spot_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cumulus::launch {
namespace {

void seeStep(LaunchRecord& record, int64_t step) {
  record.max_step = std::max(record.max_step, step);
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// One record of the launch, seen at time `t` on the report's clock.
void observeRecord(const nlohmann::ordered_json& r, double t, LaunchRecord& record) {
  const std::string type = r.value("type", "");
  const int64_t step = r.value("step", int64_t{0});
  if (type == "resume") {
    record.resumed_from_step = step;
  } else if (type == "first_step") {
    if (!record.first_step_s) record.first_step_s = t;
  } else if (type == "checkpoint") {
    record.stall_ms.push_back(r.value("stall_ms", 0.0));
  } else if (type == "preempted") {
    record.preempted_step = step;
  } else if (type == "trained") {
    record.trained_steps += r.value("steps", int64_t{0});
    record.train_seconds += r.value("seconds", 0.0);
  } else if (type == "goodput") {
    record.goodput.clear();
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (it.value().is_number() && it.key() != "step" && it.key() != "time") {
        record.goodput.emplace_back(it.key(), it.value().get<double>());
      }
    }
  }
  seeStep(record, step);
}

}  // namespace

void observeMetrics(const std::string& jsonl, double start_unix, LaunchRecord& record) {
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::ordered_json r =
        nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) continue;
    const auto time = r.find("time");
    if (time == r.end() || !time->is_number() || time->get<double>() < start_unix) continue;
    try {
      observeRecord(r, record.start_s + (time->get<double>() - start_unix), record);
    } catch (const nlohmann::json::exception& e) {
      // A field of the wrong type: not a record the trainer wrote. Name it rather than skip it.
      throw std::runtime_error("metrics record " + line + ": " + e.what());
    }
  }
}

SpotReport summarize(const std::vector<LaunchRecord>& records, const SpotReportOptions& options) {
  SpotReport report;
  report.launches = static_cast<int64_t>(records.size());
  if (records.empty()) return report;
  report.wall_s = records.back().end_s - records.front().start_s;
  report.completed = records.back().exit_code == 0 && records.back().signal == 0;
  report.final_step = records.back().max_step;

  double notice_sum = 0, restart_sum = 0, stall_ms = 0, train_s = 0;
  int64_t restarts_timed = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const LaunchRecord& r = records[i];
    if (r.notice_s) {
      ++report.preemptions;
      if (r.killed) ++report.kills;
      const double to_exit = r.end_s - *r.notice_s;
      notice_sum += to_exit;
      report.notice_to_exit_max_s = std::max(report.notice_to_exit_max_s, to_exit);
    } else if (!(r.exit_code == 0 && r.signal == 0)) {
      ++report.crashes;
    }
    if (r.first_step_s) {
      // The steps this launch ran past the point the next training launch resumed from are run
      // again. Launches that never reached a step (killed during start-up) neither lose steps
      // nor resume anything.
      for (size_t j = i + 1; j < records.size(); ++j) {
        if (!records[j].first_step_s) continue;
        const int64_t kept = std::max(r.resumed_from_step, records[j].resumed_from_step);
        report.steps_lost += std::max<int64_t>(0, r.max_step - kept);
        break;
      }
    }
    if (i > 0) {
      if (r.first_step_s) {
        const double d = *r.first_step_s - r.start_s;
        restart_sum += d;
        ++restarts_timed;
        report.restart_to_first_step_max_s = std::max(report.restart_to_first_step_max_s, d);
      }
    }
    if (!r.goodput.empty()) report.goodput = r.goodput;
    for (double s : r.stall_ms) stall_ms += s;
    report.checkpoints += static_cast<int64_t>(r.stall_ms.size());
    train_s += r.train_seconds;
  }
  if (report.preemptions > 0) report.notice_to_exit_mean_s = notice_sum / report.preemptions;
  if (restarts_timed > 0) report.restart_to_first_step_mean_s = restart_sum / restarts_timed;
  if (train_s > 0) report.stall_share = stall_ms / 1000.0 / train_s;
  if (report.wall_s > 0) {
    report.goodput_steps_per_s = static_cast<double>(report.final_step) / report.wall_s;
    report.goodput_samples_per_s =
        report.goodput_steps_per_s * static_cast<double>(options.global_batch);
    if (options.baseline_seconds > 0)
      report.goodput_ratio = options.baseline_seconds / report.wall_s;
  }
  return report;
}

std::string reportTable(const std::vector<LaunchRecord>& records, const SpotReport& report) {
  std::ostringstream out;
  char row[256];
  std::snprintf(row, sizeof row, "%-6s %-5s %9s %9s %9s %7s %7s %10s %9s %s\n", "launch", "world",
                "start_s", "end_s", "notice_s", "resume", "steps", "1st_step_s", "to_exit_s",
                "exit");
  out << row;
  for (const LaunchRecord& r : records) {
    const std::string world = r.world_size > 0 ? std::to_string(r.world_size) : "-";
    const std::string notice = r.notice_s ? fixed(*r.notice_s, 2) : "-";
    const std::string first = r.first_step_s ? fixed(*r.first_step_s - r.start_s, 2) : "-";
    const std::string to_exit = r.notice_s ? fixed(r.end_s - *r.notice_s, 2) : "-";
    const std::string exit =
        r.signal != 0 ? "signal " + std::to_string(r.signal) + (r.killed ? " (killed)" : "")
                      : std::to_string(r.exit_code);
    std::snprintf(row, sizeof row, "%-6lld %-5s %9.2f %9.2f %9s %7lld %7lld %10s %9s %s\n",
                  static_cast<long long>(r.index), world.c_str(), r.start_s, r.end_s,
                  notice.c_str(), static_cast<long long>(r.resumed_from_step),
                  static_cast<long long>(r.max_step), first.c_str(), to_exit.c_str(), exit.c_str());
    out << row;
  }
  out << "completed " << (report.completed ? "yes" : "no") << ", " << report.launches
      << " launches, " << report.preemptions << " preemptions (" << report.kills << " killed), "
      << report.crashes << " crashes, wall " << fixed(report.wall_s, 2) << " s\n"
      << "final step " << report.final_step << ", steps lost " << report.steps_lost << ", goodput "
      << fixed(report.goodput_steps_per_s, 3) << " steps/s";
  if (report.goodput_samples_per_s > 0)
    out << " = " << fixed(report.goodput_samples_per_s, 1) << " samples/s";
  if (report.goodput_ratio > 0)
    out << " (" << fixed(100 * report.goodput_ratio, 1) << "% of uninterrupted)";
  out << "\nnotice->exit mean " << fixed(report.notice_to_exit_mean_s, 3) << " s, max "
      << fixed(report.notice_to_exit_max_s, 3) << " s; restart->first step mean "
      << fixed(report.restart_to_first_step_mean_s, 3) << " s, max "
      << fixed(report.restart_to_first_step_max_s, 3) << " s\n"
      << "checkpoints " << report.checkpoints << ", stall share "
      << fixed(100 * report.stall_share, 3) << "% of train time\n";
  if (!report.goodput.empty()) {
    out << "trainer's goodput:";
    for (const auto& [key, value] : report.goodput) {
      if (key == "productive_ratio") {
        out << " productive " << fixed(100 * value, 1) << "%";
      } else {
        out << " " << key.substr(0, key.size() - 2) << " " << fixed(value, 2) << " s";
      }
    }
    out << "\n";
  }
  return out.str();
}

std::string reportJson(const SpotReport& r) {
  // Rounded as the table is: more digits would only report timer noise.
  const auto rounded = [](double x, int digits) {
    const double unit = std::pow(10.0, digits);
    return std::round(x * unit) / unit;
  };
  nlohmann::ordered_json json{
      {"completed", r.completed},
      {"launches", r.launches},
      {"preemptions", r.preemptions},
      {"kills", r.kills},
      {"crashes", r.crashes},
      {"wall_s", rounded(r.wall_s, 3)},
      {"final_step", r.final_step},
      {"steps_lost", r.steps_lost},
      {"goodput_steps_per_s", rounded(r.goodput_steps_per_s, 4)},
      {"goodput_samples_per_s", rounded(r.goodput_samples_per_s, 2)},
      {"goodput_ratio", rounded(r.goodput_ratio, 4)},
      {"notice_to_exit_mean_s", rounded(r.notice_to_exit_mean_s, 3)},
      {"notice_to_exit_max_s", rounded(r.notice_to_exit_max_s, 3)},
      {"restart_to_first_step_mean_s", rounded(r.restart_to_first_step_mean_s, 3)},
      {"restart_to_first_step_max_s", rounded(r.restart_to_first_step_max_s, 3)},
      {"checkpoints", r.checkpoints},
      {"stall_share", rounded(r.stall_share, 6)}};
  if (!r.goodput.empty()) {
    nlohmann::ordered_json split = nlohmann::ordered_json::object();
    for (const auto& [key, value] : r.goodput) split[key] = rounded(value, 3);
    json["goodput"] = std::move(split);
  }
  return json.dump();
}

}  // namespace cumulus::launch
