#pragma once
// errors.jsonl: what went wrong in a job, one JSON object per line, appended by each node's agent
// under <log-dir>/<run-id>/. Two kinds of line:
//   {"time":…,"run_id":…,"generation":0,"rank":1,"local_rank":1,"node_rank":0,"pid":123,
//    "exit_code":3 | "signal":"SIGKILL","log":"…/gen0/rank1.log"}
//   {"time":…,"run_id":…,"generation":1,"event":"regroup","lost_nodes":[2],"new_nodes":[],
//    "nodes":[0,1],"world_size":2}
// Each call opens, appends one line and closes the file; errors writing it are ignored (the
// console has the same news). Not thread-safe.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/worker_process.h"

namespace cumulus::launch {

class ErrorLog {
 public:
  ErrorLog(std::string path, std::string run_id);

  const std::string& path() const { return path_; }

  // A worker of this node exited non-zero or was killed by a signal.
  void workerFailed(int64_t generation, int rank, int local_rank, int64_t node_rank, pid_t pid,
                    const ExitStatus& status, const std::string& log_path);
  // The group of `generation` has other nodes than the previous one (node ids, ascending).
  void regroup(int64_t generation, const std::vector<int64_t>& previous,
               const std::vector<int64_t>& current, int64_t world_size);

 private:
  void append(int64_t generation, const nlohmann::ordered_json& fields);
  std::string path_;
  std::string run_id_;
};

// "0,1,3"
std::string joinIds(const std::vector<int64_t>& ids);

}  // namespace cumulus::launch
