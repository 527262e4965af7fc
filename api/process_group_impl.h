#pragma once
// Private: what a public ProcessGroup holds, for the API's own implementations (DataParallel,
// agreeOver) and for cumulus-train. Not installed.
//
// A group of more than one rank owns a distributed::GroupConnection (the Store client, the
// communicator, the funnel client). A group of one owns nothing that communicates: `group` is
// null and every collective is answered locally.

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "base/run_env.h"
#include "comm/algorithm.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "cumulus/process_group.h"
#include "distributed/group_connection.h"

namespace cumulus {

struct ProcessGroup::Impl {
  GroupOptions options;
  base::RunEnv env;
  cumulus::Algorithm algorithm = cumulus::Algorithm::kAuto;  // options.algorithm, parsed
  std::chrono::milliseconds timeout = kDefaultTimeout;
  comm::CostModel cost_model;  // options.cost_model, loaded once for every connection
  std::unique_ptr<distributed::GroupConnection> group;  // null in a group of one
  // What the connections this group had before `group` sent (an ElasticGroup re-makes it at
  // every re-forming): bytesSent() counts since the group was made, across them.
  uint64_t bytes_sent_before = 0;
  std::map<std::string, comm::OpStats> op_stats_before;  // the same for collectiveStats()

  // The communicator's options for an allreduce with `options` (GroupError for a bad algorithm
  // or timeout).
  comm::AllreduceOptions allreduceCall(const CollectiveOptions& options) const;
  // std::invalid_argument unless 0 <= root < the group's size.
  void checkRoot(const char* op, int root) const;
  // The communicator that carries a send to / receive from `peer` (kAnySource when `any`);
  // std::invalid_argument naming why there is none (a group of one, no point-to-point lanes, a
  // peer that is this rank or outside the group).
  comm::Communicator& pointToPoint(const char* op, int peer, bool any);
  // The communicator of a group of several ranks; null in a group of one.
  comm::Communicator* communicator() { return group ? &group->communicator() : nullptr; }
  // Closes the connection, if any (its peers fail at once), keeping what it sent in
  // bytes_sent_before; `group` is null afterwards.
  void closeConnection();

  // fromEnvironment with the variables read through `getenv`.
  static std::unique_ptr<ProcessGroup> fromEnvironment(const GroupOptions& options,
                                                       const base::EnvLookup& getenv);
  // A group of env.world_size ranks over a caller-owned Store that outlives it (tests run ranks
  // as threads over a comm::MemoryStore). A group of one when env.world_size == 1.
  static std::unique_ptr<ProcessGroup> overStore(const base::RunEnv& env,
                                                 const GroupOptions& options, comm::Store& store);

 private:
  // Validates `options` (GroupError naming the option) and fills everything but `env` and `group`.
  static std::unique_ptr<Impl> validated(const GroupOptions& options);
  static std::unique_ptr<ProcessGroup> wrap(std::unique_ptr<Impl> impl);
};

using distributed::timeoutOption;  // distributed/group_connection.h

}  // namespace cumulus
