#pragma once
// <cumulus/elastic.h>: a training loop of one's own that survives losing and gaining workers in
// place, as cumulus-train does (docs/library.md, "Recovery in place").
//
// Under `cumulus-run --recovery in_place` (the launcher's default) a worker that dies (SIGKILL, a
// lost host, a peer stalled past the timeout) does not restart the job: the survivors, the same
// processes, agree on a new membership, the members whose state is behind take it from a live peer
// over the network (nothing is read from disk), and the step in flight is trained again. The
// launcher starts a replacement, which joins at a step boundary and is healed the same way. A
// preemption notice makes the noticed worker leave at a step boundary (exit 75) while the others
// go on. Started any other way (restart recovery, a group of one) the same loop runs as a plain
// data-parallel loop: a failure is the launcher's to handle, and a notice stops every rank.
//
// The state to heal is the program's: `capture` returns it as a Checkpoint (the same value a
// save writes: addModule, addOptimizer, setSampler, captureRng, extra files), `restore` puts one
// back. A live peer packs what its capture returns (packCheckpoint: every file's size and SHA-256)
// and the members behind unpack, verify and restore it. Elastic keeps the step count itself
// (Checkpoint::state.step).
//
//   cumulus::Elastic elastic({capture, restore, describe(flags)});
//   elastic.attach(net->parameters(), net->buffers());  // the gradient sync's tensors
//   if (!elastic.start(resumed_step)) return 0;      // a joiner the group finished without
//   while (elastic.step() < steps) {
//     elastic.train([&] {                            // step elastic.step() + 1
//       auto idx = sampler.localIndices(elastic.rank(), elastic.size());
//       optimizer.zero_grad();
//       elastic.sync().backward(lossSum(net->forward(x(idx)), y(idx)) / global_batch);
//       optimizer.step();                            // after the step's last collective
//       sampler.advance();
//     });
//     if (elastic.step() == steps) break;
//     switch (elastic.boundary()) { ... kCheckpoint: rank 0 saves; kStop: rank 0 saves,
//                                   elastic.waitForAll(), return 75; kLeave: return 75 }
//   }
//   elastic.atEnd([&] { /* the final evaluation; rank 0 saves */ });
//   elastic.finish();
//
// The contract of train(fn): fn runs one whole step, and every collective of the step comes
// before fn changes any state that capture() returns (the optimizer update, the sampler's
// advance). After a peer's failure fn may be called again for the same step on the re-formed
// group, with another rank() and size(): it reads both on each call. When fn throws a CommError
// its state is the previous step's, and a member whose peer had completed the step takes that
// peer's state instead of training it again, so every member commits each step exactly once.
//
// Call boundary() once after each train(). After a re-forming caused by a failure, the members may
// have been at different places (one already training the next step, one still agreeing at the
// boundary): every member then goes on with train() of the step after the one the group trains
// from, and boundary() at that step returns kContinue without communicating.
//
// Blocking: start(), train(), boundary() and waitForAll() communicate and are bounded by
// GroupOptions::timeout_seconds per collective and by the membership's deadlines (a joiner waits
// for admission up to max(timeout, 60 s)). Errors: a failure that re-forming cannot mend (a wrong
// token, node 0's Store gone, no member left that holds the state, 16 re-formings in a row without
// a step) is rethrown as the CommError (or std::runtime_error) that says so; a transferred state
// that is truncated, corrupt, from another configuration or does not fit the program's tensors
// throws CheckpointError naming the sending rank and the file or tensor, before restore() is
// called where it can be checked first, and the member stops (the others re-form without it).
// Thread-safety: one training thread, except what PreemptionWatcher allows (preemption()).

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cumulus/checkpoint.h"
#include "cumulus/data_parallel.h"
#include "cumulus/errors.h"
#include "cumulus/preemption.h"
#include "cumulus/process_group.h"

namespace cumulus {

// What the program registers as its state.
struct ElasticState {
  // The state after step() steps (called on the live peer that sends it). Elastic sets
  // state.step and state.config_yaml of what it returns.
  std::function<Checkpoint()> capture;
  // Puts a received state back (called on a member that is behind). It should check before it
  // changes anything (Checkpoint::restoreModule does); throwing stops this member.
  std::function<void(const Checkpoint&)> restore;
  // What the state was built from (flags, a config file's text): a member that receives a state
  // captured under another description refuses it, naming the first line that differs.
  std::string config;
};

struct ElasticOptions {
  GroupOptions group;                 // algorithm, timeout
  DataParallelOptions data_parallel;  // the gradient sync of sync()
  PreemptionOptions preemption;       // the notice's grace period and exit code
  // The stop agreement boundary() asks, given the standard one (preemption()): that same one, a
  // wrapper around it (one that also raises a notice of its own, say), or, without recovery in
  // place, one of the program's own. In place the members' notices are told apart inside the
  // standard one's decide(): a replacement that never calls it makes a notice stop every member
  // instead of letting the noticed one leave. Empty: the standard one. Must not return null.
  std::function<std::shared_ptr<StopAgreement>(std::shared_ptr<StopAgreement> standard)> stop;
  // At a boundary where the group has fewer members than this (after losing one), wait for
  // replacements to join before training on, up to wait_for_members_seconds (then train on with
  // fewer). A notice ends the wait. 0: never wait; train on at once with whoever is left.
  int wait_for_members = 0;
  double wait_for_members_seconds = 120;
};

// The group's membership after it formed or changed.
struct Membership {
  int rank = 0;
  int size = 1;
  int64_t epoch = 0;        // 0 at launch, then one more per re-forming
  int64_t step = 0;         // steps of the state the group trains from
  std::string cause;        // "start", "failure", "join" (joiners admitted), "leave" (a notice)
  std::string reason;       // for "failure": what broke the group (the CommError's text)
  int source = -1;          // the rank that sent the state, or -1 when nobody needed it
  std::vector<int> healed;  // the ranks that received it
  double seconds = 0;       // from the failure (or the boundary) to the re-formed group
};

// Where this member's time inside Elastic went, in seconds since it was constructed, cumulative
// (Elastic::times()). A recorder (<cumulus/recorder.h>) turns it into the run's goodput split, so
// a loop that only calls train() and boundary() gets an honest account of its time.
struct ElasticTimes {
  double start = 0;      // start(): the first collectives, or a replacement's admission and heal
  double train = 0;      // train(): each step's committed attempt, comm_wait included
  double comm_wait = 0;  // of `train`: blocked in sync()'s finish() (SyncStepStats)
  double redone = 0;     // train() attempts a peer's failure threw away (the wait that saw it too)
  // From a failure seen, or a boundary that agreed on a leave or a join, to the re-formed group
  // with every member healed.
  double reform = 0;
  double boundary = 0;     // boundary()'s agreement (re-forming and member waits excluded)
  double member_wait = 0;  // boundary() waiting for replacements (wait_for_members)
  // After a boundary that agreed kCheckpoint or kStop, until the next train() or waitForAll():
  // the program's save, as the training thread waits for it.
  double checkpoint = 0;
  double at_boundary = 0;  // atBoundary() and atEnd(): the program's work between steps
  int64_t reforms = 0;     // re-formings since construction
};

// What every member does after a step, by agreement (boundary()).
enum class ElasticAction {
  kContinue,
  kCheckpoint,  // rank 0 checkpoints this step, then every member goes on
  kStop,        // rank 0 checkpoints this step, every member calls waitForAll() and exits 75
  kLeave,       // this member got a notice and left; the others go on: exit 75 now
};

class Elastic {
 public:
  // Joins the group the launcher describes (ProcessGroup's environment, plus cumulus-run's
  // CUMULUS_RECOVERY=in_place variables). A launch member connects to the group's first
  // membership here; a replacement started into a running group connects in start(). Throws
  // GroupError for a bad option or environment, std::invalid_argument for an empty callback.
  explicit Elastic(ElasticState state, ElasticOptions options = {});
  // The same, with the state registered later by setState() (before start()): a program that
  // connects first and builds its model from rank() and size().
  explicit Elastic(ElasticOptions options = {});
  // Over a group of the program's own (not owned; it outlives this object), or a world of one
  // (null): no recovery in place (a failure is rethrown, a notice stops every member), the same
  // loop otherwise.
  Elastic(ProcessGroup* group, ElasticOptions options);
  ~Elastic();
  Elastic(const Elastic&) = delete;
  Elastic& operator=(const Elastic&) = delete;

  // The state to heal, when the constructor was not given one (before start()).
  void setState(ElasticState state);
  // The parameters sync() all-reduces the gradients of, and the model's buffers it keeps
  // identical (DataParallel::attach; before start()). Without parameters sync() has no gradient
  // sync to give.
  void attach(const std::vector<torch::Tensor>& params,
              const std::vector<torch::Tensor>& buffers = {});
  // Called on a member that saw a peer's failure, before the group re-forms (a place to log
  // `reason`, the CommError's text, or to mark the program idle); on the training thread.
  void onFailure(std::function<void(const std::string& reason)> callback);
  // Called on every member after the membership formed or changed (start() included), on the
  // training thread, with the state already in place. A place to reshard data or log.
  void onMembershipChange(std::function<void(const Membership&)> callback);

  // Before the first step. `steps_done`: the steps of the state this member starts from (0, or a
  // checkpoint's step; every launch member must pass the same: std::invalid_argument on every
  // member otherwise). A launch member then runs the group's first collectives: the check of
  // steps_done, the gradient sync's attach (rank 0's parameters and buffers everywhere) and
  // `prepare`, the program's own (a broadcast the sync does not cover, say). In place, a peer lost
  // during them (or while the first membership connected) re-forms the group as in train(), and
  // every member of the new one takes one member's whole state, since they may have run on some
  // members only; they are not run again. A replacement waits here to be admitted and receives the
  // state from a live peer (it runs no `prepare`). Returns false when the group finished training
  // before admitting it (nothing to do: exit 0).
  bool start(int64_t steps_done = 0, const std::function<void()>& prepare = {});
  // Trains step step() + 1 with fn (see the contract above); returns once the step is committed.
  void train(const std::function<void()>& fn);
  // After each step but the last: notices and checkpoint requests agreed, waiting replacements
  // admitted and healed, members with a notice let go when enough others stay. Replacements are
  // admitted only at a boundary that agreed kContinue: after kCheckpoint the program's save (and
  // what it gathers for it) runs on the membership that trained the step, and they come in at
  // the next boundary.
  ElasticAction boundary();
  // Runs fn, work after a committed step that communicates over group() (an evaluation's sums,
  // a gather for a checkpoint, a balance of the batch): a peer's failure in fn re-forms the group
  // as in train() and returns false, and every member then skips the rest of this boundary
  // (boundary() included, which returns kContinue without communicating) and trains the next
  // step. True when fn returned. Without recovery in place fn's CommError is rethrown. Called
  // inside another atBoundary()'s or atEnd()'s fn (a recorder's sum within the program's boundary
  // work, say), it just runs fn: a failure in it ends the outer call, which re-forms the group.
  bool atBoundary(const std::function<void()>& fn);
  // After the last step, on every member: runs fn, the run's last boundary (the final
  // evaluation, the final checkpoint, DiLoCo's last round). Unlike atBoundary() it is never
  // skipped, since no next step can take its place: a peer's failure in fn (or one the last
  // step's train() recovered from) re-forms the group, and fn runs again, whole, on the new
  // membership, until it returns. fn must therefore be safe to run again after a failure part of
  // the way through it. Without recovery in place fn's CommError is rethrown. Nested in another
  // atBoundary()'s or atEnd()'s fn, it just runs fn, as a nested atBoundary() does.
  void atEnd(const std::function<void()>& fn);
  // At the boundary that returned kLeave, kStop or a leave's kContinue: the ranks (of the
  // membership before it) that got a notice; empty otherwise.
  const std::vector<int>& leaving() const;
  // After kStop: returns once every member got there (rank 0's checkpoint is durable).
  void waitForAll();
  // After the last step, on every member: replacements still waiting to join give up.
  void finish();

  // Whether the launcher asks for recovery in place (cumulus-run's CUMULUS_RECOVERY=in_place): an
  // Elastic built from the environment now would re-form in place. GroupError for malformed
  // in-place variables.
  static bool inPlaceRequested();
  // Recovery in place is on (cumulus-run's CUMULUS_RECOVERY=in_place).
  bool inPlace() const;
  // In place, this member's id for logs (CUMULUS_MEMBER_ID: node.local_rank.restart); empty
  // otherwise.
  std::string memberId() const;
  // A replacement started into a running group, until start() admitted it: it reads no
  // checkpoint, since a live peer sends it the state.
  bool joining() const;
  int rank() const;
  int size() const;
  int64_t epoch() const;
  int64_t step() const;  // steps committed
  // The membership now, as onMembershipChange() last told it (after start()).
  const Membership& membership() const;
  // This member left the group on a notice (boundary() returned kLeave).
  bool left() const;
  // Where this member's time went so far (ElasticTimes).
  const ElasticTimes& times() const;
  // The group of the current membership (its identity stays; its rank and size follow).
  ProcessGroup& group();
  // The gradient sync over the current membership, after start() and attach() (rebuilt at each
  // change; do not keep it across train() calls). std::logic_error without attached parameters.
  // With DataParallelOptions::compression kBf16 each member's error feedback is carried over a
  // re-forming; a member that was healed starts from none.
  GradientSync& sync();
  // The notices' watcher (notify(), requestCheckpoint(), noticed()), from construction on. A
  // notice and its grace deadline outlive a failure's or a join's re-forming. After other
  // members left on a notice it is replaced (a SIGTERM is seen by the new one; a notify() made
  // during that boundary is not): call preemption() again rather than keeping the reference
  // across boundary().
  PreemptionWatcher& preemption();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus
