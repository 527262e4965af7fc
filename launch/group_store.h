#pragma once
// The agents' group protocol over the Store (keys: comm/store_keys.h, "The agents' group
// protocol"). Per generation g:
//   - the first agent whose worker fails records what failed (compare-and-set: the first wins);
//     every agent watches for it and stops its workers; an agent whose worker failed permanently
//     (exit code 2 or 127) says so too, first, and then every agent gives up;
//   - node 0 records why it re-forms the group to admit waiting nodes; every agent watches that;
//   - after a failure each agent says it stopped its workers, and node 0, when the job gives up,
//     waits (bounded) for all of them before its Store goes away;
//   - at the end each agent says its workers finished, and node 0 waits (bounded) for all;
//   - node 0 publishes the funnel's parameter server for the others to read;
//   - recovery in place: each agent numbers the processes it starts in a worker slot (the n of
//     CUMULUS_MEMBER_ID, counted in the Store, so a node that comes back under the same id never
//     reuses a member id), marks a dead worker gone for the workers' quorum (comm/quorum.h), and
//     a node that joined the running group late lists itself, so node 0 waits for it at the end.
//
// Every call throws cumulus::CommError when the Store fails; the waits also on their timeout.
// Non-blocking unless it says "waits". Not thread-safe: used from the launcher's one thread.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"

namespace cumulus::launch {

class GroupStore {
 public:
  explicit GroupStore(comm::Store& store) : store_(store) {}

  // Records `what` as generation g's failure unless one is recorded already; `permanent`: a
  // restart would repeat it, which is recorded even when another failure came first.
  void recordFailure(int64_t g, const std::string& what, bool permanent = false);
  struct Failure {
    std::string what;        // the first failure recorded
    bool permanent = false;  // some node recorded a permanent one
  };
  // The failure recorded for generation g, if any.
  std::optional<Failure> failure(int64_t g);

  // Records why node 0 re-forms generation g's group unless a reason is recorded already.
  void proposeRegroup(int64_t g, const std::string& why);
  // Why generation g's group is re-formed, if it is.
  std::optional<std::string> regroup(int64_t g);

  void markStopped(int64_t g, int64_t node);
  // Waits up to `timeout` until every node of `nodes` said it stopped its workers.
  void waitStopped(int64_t g, const std::vector<int64_t>& nodes, std::chrono::milliseconds timeout);

  void markDone(int64_t g, int64_t node);
  // Waits up to `timeout` until every node of `nodes` said its workers finished.
  void waitDone(int64_t g, const std::vector<int64_t>& nodes, std::chrono::milliseconds timeout);

  // The n of the next process started in worker slot (node, local_rank): 0, 1, 2, ….
  int64_t nextMember(int64_t g, int64_t node, int64_t local_rank);
  // Tells the workers' quorum that member `member_id` is gone and why (what
  // comm::Quorum::markGone writes).
  void markGone(int64_t g, const std::string& member_id, const std::string& why);
  // Whether generation g's workers (`world` of them at launch) recover in place: some of them
  // announced themselves to the membership protocol (comm/quorum.h, epoch 0), whether or not it
  // closed. A program that does not recover in place (a user's own, without Elastic) never does,
  // so its failures take the restart path.
  bool runsInPlace(int64_t g, int64_t world);
  // comm::Quorum::liveMembers: none before generation g's epoch 0 closed; else the members of its
  // newest epoch not marked gone.
  std::optional<std::vector<std::string>> liveMembers(int64_t g);
  // Adds `node` to the nodes that joined generation g's running group late.
  void addJoined(int64_t g, int64_t node);
  // Those nodes, in joining order.
  std::vector<int64_t> joined(int64_t g);

  void publishParameterServer(int64_t g, const std::string& endpoint);
  // Waits up to `timeout` for node 0 to publish generation g's parameter server.
  std::string parameterServer(int64_t g, std::chrono::milliseconds timeout);

  // Generation g's MASTER_PORT (job_setup.h, prepareMasterPort), published by node 0.
  void publishMasterPort(int64_t g, int port);
  // Waits up to `timeout` for it; CommError(kStore) if what node 0 published is not a port.
  int masterPort(int64_t g, std::chrono::milliseconds timeout);

 private:
  comm::Store& store_;
};

}  // namespace cumulus::launch
