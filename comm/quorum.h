#pragma once
// Quorum: who trains together, epoch by epoch, when a group recovers in place (docs/recovery.md,
// "The membership protocol"; `launch.recovery: in_place`). No LibTorch: it speaks
// only to the Store; the trainer moves the state and rebuilds the communicator.
//
// Within one agents' generation g (CUMULUS_GENERATION) the workers go through epochs 0, 1, 2, ….
// An epoch is a closed record in the Store: its members in rank order, the step the group
// trains from, and which rank holds that step's state. Each epoch has its own communicator
// generation (commGeneration()), so a frame or a handshake of an earlier epoch is rejected
// (fencing), and its own data-plane keys.
//
// Members are worker processes named by the agent: CUMULUS_MEMBER_ID "<node>.<local>.<n>" (node
// id, local rank, the n-th process the agent started in that slot). Ids order members: at an
// epoch's close survivors keep their order and admitted joiners follow in id order, so the same
// failure schedule gives the same ranks.
//
// The moves (every one has a deadline; a Store failure is the Store's CommError, unchanged):
//   - start: epoch 0 is the launch's group; every rank publishes its id, rank 0 closes it.
//   - reform: after a failure (a CommError from a collective) or at an agreed step boundary
//     (leavers, joiners), each member of epoch q that is still there says it is present for q+1
//     with the steps its state has done. Epoch q+1 closes (compare-and-set, first closer wins)
//     once every member of q is present, marked gone (by its agent, or by itself on leaving) or
//     named in `leaving`; or when `window` has passed since this member arrived, with whoever is
//     present. Its step is the most steps any present member has done; members with fewer (a
//     rank that failed just before its optimizer step while another finished it) and joiners are
//     `stale` and take the state from `source`.
//   - A member that finds q+1 closed without it (it stalled and was declared gone) is fenced
//     out: it joins again as a joiner, whose state is stale.
//   - join: a process started into a running group takes a ticket and waits until an epoch
//     admits it (up to `join_timeout`). Epochs admit waiting joiners when they close, up to
//     `max_members`; the running group looks at pendingJoiners() between steps and reforms to let
//     them in. A group that finished says so (finish()), and joiners still waiting stop.
//
// Not thread-safe: one Quorum per worker, used from its training thread. pendingJoiners() reads
// one key and may be called from another thread.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"

namespace cumulus::comm {

struct QuorumOptions {
  int64_t generation = 0;         // the agents' generation (CUMULUS_GENERATION)
  std::string member_id;          // this process (CUMULUS_MEMBER_ID)
  int64_t max_members = 1 << 20;  // joiners beyond it wait for room
  // How long a reform waits for members of the last epoch that are neither present nor marked
  // gone (a lost host's workers: nobody marks them).
  std::chrono::milliseconds window{2000};
  std::chrono::milliseconds join_timeout{60000};  // a joiner's wait for admission
  std::chrono::milliseconds poll{10};             // between Store reads while waiting
};

struct QuorumEpoch {
  int64_t generation = 0;
  int64_t epoch = 0;
  std::vector<std::string> members;  // rank order
  int64_t step = -1;  // steps done of the state the epoch trains from; -1 at epoch 0 (the launch's)
  int source = -1;    // rank that sends that state; -1 when nobody is stale
  std::vector<int> stale;  // ranks that receive it, ascending
  int64_t admitted = 0;    // join tickets admitted so far, this epoch's included

  // The Communicator's generation for this epoch: generation * 1'000'000 + epoch + 1, never the
  // agents' generation itself.
  uint64_t commGeneration() const;
  // This id's rank, or -1.
  int rankOf(const std::string& id) const;
  int size() const { return static_cast<int>(members.size()); }
  bool isStale(int rank) const;
  // The record as stored (JSON) and back; parse throws CommError(kBadFrame) naming the key's
  // problem for a record it cannot read.
  std::string encode() const;
  static QuorumEpoch decode(const std::string& text, int64_t generation, int64_t epoch);
};

class Quorum {
 public:
  Quorum(Store& store, QuorumOptions options);

  // Epoch 0: publishes this member's id under `rank` and returns the epoch (rank 0 closes it when
  // all `world` ids are there). Blocks up to `timeout`.
  QuorumEpoch start(int rank, int world, std::chrono::milliseconds timeout);
  // The next epoch after `last` (see the header comment). `steps_done`: this member's state;
  // `leaving`: ids agreed to leave at this boundary (not waited for). Returns an epoch this
  // member belongs to: when fenced out of last.epoch + 1 it joins (join()) and returns the epoch
  // that admits it.
  // `heal_everyone`: this member has trained no step since the launch (start-up collectives cut
  // short by a failure may have run on some members only): if this member closes the epoch, every
  // member but the source is `stale`, so that all go on from one member's state.
  QuorumEpoch reform(const QuorumEpoch& last, int64_t steps_done,
                     const std::vector<std::string>& leaving = {}, bool heal_everyone = false);
  // Waits to be admitted to a running group (CommError kTimeout after join_timeout, naming the
  // generation and the last epoch seen). None when the group finished training first.
  std::optional<QuorumEpoch> join();
  // The group trained its last step: joiners still waiting give up (join() returns none).
  void finish(int64_t last_step);
  // Join tickets not yet admitted by `current` (one Store read).
  int64_t pendingJoiners(const QuorumEpoch& current);
  // Blocks until a joiner holds a ticket `current` has not admitted (true), or `timeout` passes
  // (false). One Store wait, no polling.
  bool waitForJoiner(const QuorumEpoch& current, std::chrono::milliseconds timeout);
  // Marks this member gone (it leaves after a notice), so reforms do not wait for it.
  void leave(const std::string& why);
  // Marks `member_id` gone: its agent saw the process die. Any process may call it.
  static void markGone(Store& store, int64_t generation, const std::string& member_id,
                       const std::string& why);
  // Who could still admit a replacement, for an agent deciding between a replacement and a
  // restart of the group: none when epoch 0 of `generation` has not closed (the launch's group
  // never formed), else the members of the newest closed epoch that are not marked gone (empty:
  // no member holds the training state any more). A few Store reads; any process.
  static std::optional<std::vector<std::string>> liveMembers(Store& store, int64_t generation);

 private:
  bool present(int64_t epoch, const std::string& id);
  bool gone(const std::string& id);
  // Closes `epoch` from the present members of `last` (and waiting joiners); returns the record
  // that won the compare-and-set, which may be another closer's.
  QuorumEpoch close(const QuorumEpoch& last, const std::vector<std::string>& leaving,
                    bool heal_everyone);
  QuorumEpoch waitForRecord(int64_t epoch, std::chrono::steady_clock::time_point deadline);
  // `epoch`, or a CommError saying the group finished while this member was fenced out.
  QuorumEpoch admitted(std::optional<QuorumEpoch> epoch, int64_t fenced_from);
  std::vector<std::string> waitingJoiners(int64_t from_ticket, int64_t room, int64_t* admitted);

  Store& store_;
  QuorumOptions options_;
};

}  // namespace cumulus::comm
