#include "launch/error_log.h"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <iterator>

#include "configs/json.h"

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

std::string jsonIds(const std::vector<int64_t>& ids) { return "[" + joinIds(ids) + "]"; }

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

void ErrorLog::append(int64_t generation, const std::string& fields) {
  std::ofstream err(path_, std::ios::app);
  err << "{\"time\":\"" << utcNow() << "\",\"run_id\":" << configs::jsonQuote(run_id_)
      << ",\"generation\":" << generation << "," << fields << "}\n";
}

void ErrorLog::workerFailed(int64_t generation, int rank, int local_rank, int64_t node_rank,
                            pid_t pid, const ExitStatus& status, const std::string& log_path) {
  append(generation,
         "\"rank\":" + std::to_string(rank) + ",\"local_rank\":" + std::to_string(local_rank) +
             ",\"node_rank\":" + std::to_string(node_rank) + ",\"pid\":" + std::to_string(pid) +
             (status.signal ? ",\"signal\":\"" + signalName(status.signal) + "\""
                            : ",\"exit_code\":" + std::to_string(status.exit_code)) +
             ",\"log\":" + configs::jsonQuote(log_path));
}

void ErrorLog::regroup(int64_t generation, const std::vector<int64_t>& previous,
                       const std::vector<int64_t>& current, int64_t world_size) {
  append(generation, "\"event\":\"regroup\",\"lost_nodes\":" + jsonIds(minus(previous, current)) +
                         ",\"new_nodes\":" + jsonIds(minus(current, previous)) + ",\"nodes\":" +
                         jsonIds(current) + ",\"world_size\":" + std::to_string(world_size));
}

}  // namespace cumulus::launch
