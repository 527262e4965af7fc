#include "launch/error_log.h"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

namespace cumulus::launch {
namespace {

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The ids in `a` and not in `b` (both ascending).
std::vector<int64_t> minus(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

std::string joinIds(const std::vector<int64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

ErrorLog::ErrorLog(std::string path, std::string run_id)
    : path_(std::move(path)), run_id_(std::move(run_id)) {}

void ErrorLog::append(int64_t generation, const nlohmann::ordered_json& fields) {
  nlohmann::ordered_json line{{"time", utcNow()}, {"run_id", run_id_}, {"generation", generation}};
  line.update(fields);
  std::ofstream err(path_, std::ios::app);
  err << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

void ErrorLog::workerFailed(int64_t generation, int rank, int local_rank, int64_t node_rank,
                            pid_t pid, const ExitStatus& status, const std::string& log_path) {
  nlohmann::ordered_json fields{
      {"rank", rank}, {"local_rank", local_rank}, {"node_rank", node_rank}, {"pid", pid}};
  if (status.signal) {
    fields["signal"] = signalName(status.signal);
  } else {
    fields["exit_code"] = status.exit_code;
  }
  fields["log"] = log_path;
  append(generation, fields);
}

void ErrorLog::regroup(int64_t generation, const std::vector<int64_t>& previous,
                       const std::vector<int64_t>& current, int64_t world_size) {
  append(generation, {{"event", "regroup"},
                      {"lost_nodes", minus(previous, current)},
                      {"new_nodes", minus(current, previous)},
                      {"nodes", current},
                      {"world_size", world_size}});
}

}  // namespace cumulus::launch
