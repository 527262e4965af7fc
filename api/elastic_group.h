#pragma once
// Private: a public ProcessGroup whose membership changes in place (`launch.recovery: in_place`,
// comm/quorum.h). The public Elastic (<cumulus/elastic.h>) builds one when the launcher says
// CUMULUS_RECOVERY=in_place, re-forms it after a communication failure or at an agreed step
// boundary, and moves the program's state to the members that need it; cumulus-train trains on
// that Elastic. Not installed: programs reach it through Elastic.
//
// The public group() keeps its identity across epochs; its rank(), size() and generation()
// follow the current epoch, and a group of one has no communicator (collectives return at once),
// so a lone survivor trains on and can grow again.
//
// Blocking: every call that talks to the Store or connects a communicator has a deadline (the
// comm timeout for connecting, QuorumOptions for the membership). Errors: cumulus::CommError from the
// Store and the rendezvous, unchanged (kStore when node 0's Store is gone: in-place recovery
// cannot go on without it); GroupError for a bad environment. Training thread only, except
// pendingJoiners().

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/run_env.h"
#include "comm/quorum.h"
#include "cumulus/process_group.h"

namespace cumulus::comm {
class StoreClient;
}

namespace cumulus {

struct ElasticSettings {
  std::string member_id;          // CUMULUS_MEMBER_ID
  bool joining = false;           // CUMULUS_JOIN=1: started into a running group
  int64_t min_workers = 1;        // CUMULUS_MIN_WORKERS
  int64_t max_workers = 1 << 20;  // CUMULUS_MAX_WORKERS
};

// The launcher's in_place variables, or none when CUMULUS_RECOVERY is not in_place. GroupError
// naming a variable that is missing or malformed.
std::optional<ElasticSettings> elasticSettings(const base::EnvLookup& getenv);

class ElasticGroup {
 public:
  // Connects to the Store (MASTER_ADDR/MASTER_PORT), then: a launch member closes epoch 0 with the
  // other ranks and connects; a joiner (settings.joining) does nothing more until join(), so that
  // it builds its model before the group waits for it. A peer lost while epoch 0 connects is not
  // an error here: connectError() says so, and the caller re-forms (Elastic::start does).
  // CommError when epoch 0 does not close (a launch member never arrived: the agent restarts the
  // group) or for an unrecoverable failure (a wrong token, no Store).
  ElasticGroup(const GroupOptions& options, const ElasticSettings& settings,
               const base::EnvLookup& getenv = base::systemEnvironment);
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  ProcessGroup& group() { return *group_; }
  const comm::QuorumEpoch& epoch() const { return epoch_; }
  const ElasticSettings& settings() const { return settings_; }
  // False for a joiner until join() returned.
  bool joined() const { return joined_; }
  // A launch member whose epoch 0 failed to connect (a peer lost on the way): the error's text,
  // until the next reform(); empty otherwise. The group is a group of one until then.
  const std::string& connectError() const { return connect_error_; }
  // A joiner's admission: waits for an epoch that takes it, then connects. False when the group
  // finished training first (nothing is connected then).
  bool join();
  // The group trained its last step: joiners still waiting stop (rank 0 calls it).
  void finish(int64_t last_step);
  // The next epoch, after a failure (leaving empty) or at an agreed boundary, and connects to it.
  // `steps_done`: the optimizer steps this member's state has taken (-1: none). A member fenced
  // out of the next epoch joins again and comes back through a later one.
  // `heal_everyone`: Quorum::reform's (this member trained no step since the launch).
  const comm::QuorumEpoch& reform(int64_t steps_done, const std::vector<int>& leaving_ranks = {},
                                  bool heal_everyone = false);
  // Join tickets the current epoch has not admitted (one Store read; any thread).
  int64_t pendingJoiners();
  // Rank 0 at a step boundary after `steps_done` steps: whether replacements wait to join. One
  // Store read at most every 0.2 s or 16 steps (false in between), and false on other ranks and
  // when the group is at its maximum size.
  bool joinersWaiting(int64_t steps_done);
  // Blocks until a replacement waits to join (true) or `timeout` passes (false): one Store wait.
  bool waitForJoiner(std::chrono::milliseconds timeout) {
    return quorum_->waitForJoiner(epoch_, timeout);
  }
  // Marks this member gone before it exits after a notice, so that the others do not wait for it.
  void leave(const std::string& why);

 private:
  void connect(const comm::QuorumEpoch& epoch);

  ElasticSettings settings_;
  base::RunEnv env_;  // the launcher's; rank, size and generation are replaced per epoch
  std::unique_ptr<comm::StoreClient> store_;
  std::unique_ptr<comm::Quorum> quorum_;
  std::unique_ptr<ProcessGroup> group_;
  comm::QuorumEpoch epoch_;
  bool joined_ = false;
  std::string connect_error_;         // epoch 0's connection failed: re-form before training
  double joiners_checked_at_ = -1;    // rank 0: when it last looked (steady seconds)
  int64_t joiners_checked_step_ = 0;  // and after which step
};

// One round of the stop agreement at a step boundary of an in-place group: the MAX of every
// rank's PreemptionWatcher proposal, as an allgather that also tells who proposed what and whether
// rank 0 saw replacements waiting. (api/boundary_vote.cc)
struct BoundaryVote {
  std::vector<int64_t> proposals;  // by rank
  bool joiners_waiting = false;
  int64_t max = 0;
  // The ranks whose proposal is a notice (PreemptionWatcher's level 2): those that leave.
  std::vector<int> noticed() const;
};
BoundaryVote voteAtBoundary(ProcessGroup& group, int64_t proposal, bool joiners_waiting);

// A packed state (packCheckpoint) from `source` to every member of `group` in two broadcasts: its
// size, then its bytes as int64 words. The sender passes it; every member gets back what arrived.
// CheckpointError naming the sender for a size no process could hold, before allocating it;
// CommError as the broadcasts throw it. (api/boundary_vote.cc)
std::string broadcastPacked(ProcessGroup& group, int source, const std::string& packed);

}  // namespace cumulus
