#pragma once
// Elastic rendezvous: which nodes form the group of one generation (torchrun's elastic
// rendezvous, simplified). One round per generation g lives in the Store under the single key
// `rdzv/<g>/state`, changed only by compare-and-set, so joining and closing are atomic:
//
//   {"state":"open","nodes":[{"id":0,"nproc":2,"nonce":"N"},…]}   nodes that joined, in join
//                                                                  order
//   {"state":"closed","restarts":R,"nodes":[…]}   the group of generation g (R = restarts so
//                                                 far), by node id
//   {"state":"ended","exit_code":C,"reason":"…"}  no group any more: the job ended with code C
//
// A node joins the first round at or after the generation it asks for that is still open. A round
// that closed without it is skipped (the node is late: it waits in the next round, which opens
// when the running group restarts). With `join_running` (recovery in place) a late node does not
// wait: when the newest round closed without it, join() returns that round as kRunning and the
// node's workers join the running group. Only the host (node id 0, which hosts the Store) closes a
// round, once it has joined it itself, when
//   - max_nodes nodes have joined, or
//   - at least min_nodes have joined, no node joined for `last_call`, and every node of the
//     previous group that announced it will come back (announceRejoin) has joined, or
//   - `timeout` has passed since the host joined and at least min_nodes have joined.
// With fewer than min_nodes when `timeout` passes the host ends the round (exit code 1, or 2 at
// generation 0 where no group ever ran) with a message naming how many joined and who.
//
// In the closed round nodes are ordered by node id (--node-rank): node id 0 is node rank 0, and
// the node ranks of the others are their positions (dense, 0 … n-1). Global ranks are assigned in
// that order, each node taking as many as it has workers.
//
// Not thread-safe: one RendezvousRound per launcher, used from one thread. The host reads the round
// every `poll`; the others block in the Store (a wait on `rdzv/<g>/settled`, 250 ms at a time),
// so a large round costs node 0 a few calls per node per second. `interrupted` is checked between
// calls. A Store failure throws cumulus::CommError.

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/error.h"
#include "comm/store.h"

namespace cumulus::launch {

// A mistake only the user can fix, e.g. two nodes with the same --node-rank.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RoundNode {
  int64_t node_id = 0;  // --node-rank: 0 … max_nodes-1, unique in the job
  int64_t nproc = 1;    // workers on the node
  std::string nonce;    // tells one launcher process from another with the same node id
};

struct Round {
  // kRunning: the newest round closed without this node (join_running); `nodes` is its group.
  enum class Outcome { kClosed, kEnded, kInterrupted, kRunning };
  Outcome outcome = Outcome::kClosed;
  int64_t generation = 0;
  std::vector<RoundNode> nodes;  // kClosed: the group, by node id
  int64_t restarts = 0;          // kClosed: the group restarts so far, as the host counted them
  int exit_code = 0;             // kEnded: the job's exit code
  std::string reason;            // kEnded: why, for the console

  int64_t worldSize() const;
  // Position of `node_id` in `nodes` (its node rank), or -1.
  int64_t nodeRankOf(int64_t node_id) const;
  // The global rank of the first worker of `node_id`; requires nodeRankOf(node_id) >= 0.
  int64_t firstRankOf(int64_t node_id) const;
  // "0,1,3"
  std::string nodeIds() const;
};

struct RendezvousOptions {
  int64_t min_nodes = 1;
  int64_t max_nodes = 1;
  std::chrono::milliseconds last_call{3000};  // --rdzv-last-call
  std::chrono::milliseconds timeout{60000};   // --rdzv-timeout: the host's wait for min_nodes
  std::chrono::milliseconds poll{50};
  bool join_running = false;  // see the header comment
  // The clock the host measures `last_call` and `timeout` with; empty = steady_clock::now. A
  // test passes a clock it advances by hand, so that "a node joined during the last call" or
  // "the last call passed" are states it sets rather than durations it hopes the threads keep.
  std::function<std::chrono::steady_clock::time_point()> now;
};

class RendezvousRound {
 public:
  static constexpr int64_t kHostId = 0;

  // `self.nonce` must differ between launcher processes (a random string). `note` receives
  // progress lines for the console ("generation 3 closed without this node; …"); may be empty.
  // `interrupted` is polled while waiting; when it returns true join() returns kInterrupted.
  RendezvousRound(comm::Store& store, RendezvousOptions options, RoundNode self,
                  std::function<bool()> interrupted = {},
                  std::function<void(const std::string&)> note = {});

  // Joins the first open round at or after `generation` and blocks until it closes with this
  // node in it (kClosed) or ends (kEnded), or `interrupted` (kInterrupted: a node other than the
  // host leaves the round if it is still open, so no group forms with it). The host publishes
  // `restarts` in the round it closes. Throws RendezvousError when this node id is already in
  // the open round, cumulus::CommError when the Store fails.
  Round join(int64_t generation, int64_t restarts);

  // Tells the host that this node, a member of the group of `next_generation - 1`, will join
  // `next_generation`, so the host waits for it beyond the last call. Non-blocking.
  void announceRejoin(int64_t next_generation);

  // The node ids waiting in round `generation` while it is open (nodes that arrived after the
  // group of `generation - 1` formed); empty when none or when it is not open. Non-blocking.
  std::vector<int64_t> waiting(int64_t generation);

  // Host only: ends round `generation` for good (the job ended), so the nodes waiting in it exit
  // with `exit_code` and `reason`, and waits up to `linger` for them to have read it. Returns the
  // number of nodes that were waiting. Does nothing to a round that already closed or ended.
  int end(int64_t generation, int exit_code, const std::string& reason,
          std::chrono::milliseconds linger);

  const RendezvousOptions& options() const { return options_; }

 private:
  struct State;
  // How long a node other than the host blocks in the Store at a time, between checks of
  // `interrupted` and of the state itself.
  static constexpr std::chrono::milliseconds kWaitSlice{250};
  bool interrupted() const { return interrupted_ && interrupted_(); }
  std::chrono::steady_clock::time_point clockNow() const;
  void sleep() const;
  // Tells `note` that some of the `nodes` waiting in ended round `g` did not acknowledge it.
  void noteUnread(int64_t g, size_t nodes, std::chrono::milliseconds linger,
                  const cumulus::CommError& error) const;
  // Not the host: blocks up to kWaitSlice until the host settled round `g`.
  void awaitSettled(int64_t g);
  // The host: compare-and-set of round `g`'s state, then the wake-up for the others. Returns
  // whether the state was `expected`.
  bool settle(int64_t g, const std::string& expected, const std::string& desired);
  // Adds this node to round `g`; false when the round is no longer open (`state` says what it is).
  bool tryJoin(int64_t g, State& state);
  // Waits (the host: closes) until round `g`, which this node joined, is no longer open.
  Round waitForClose(int64_t g, int64_t restarts);
  // Takes this node out of round `g` if it is still open (interrupted while waiting).
  void leave(int64_t g);
  // Host: closes `state` if the rules allow; returns whether the round is no longer open.
  bool maybeClose(int64_t g, State& state, int64_t restarts);

  comm::Store& store_;
  RendezvousOptions options_;
  RoundNode self_;
  std::function<bool()> interrupted_;
  std::function<void(const std::string&)> note_;
  std::vector<int64_t> previous_group_;  // node ids of the last group this node was in
  // Host bookkeeping of the round being closed.
  std::string last_seen_;  // the open state last read
  std::chrono::steady_clock::time_point last_change_;
  std::chrono::steady_clock::time_point host_deadline_;
};

}  // namespace cumulus::launch
