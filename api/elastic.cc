// Elastic (<cumulus/elastic.h>): a program's own loop over the epochs of an ElasticGroup, healing
// members from a live peer with the program's state packed as a checkpoint. Without in-place
// recovery, a plain group and a PreemptionWatcher over it.

#include "cumulus/elastic.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "api/elastic_group.h"

namespace cumulus {
namespace {

// Re-formings in a row without a step committed in between before Elastic gives up.
constexpr int kMaxReformsWithoutProgress = 16;

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Retried in place: not a wrong token, not a lost Store (no epoch can form without it), not the
// caller's own mistake. Each of those fails the same way again.
bool recoverable(const CommError& error) {
  return error.kind() != CommErrorKind::kUnauthorized && error.kind() != CommErrorKind::kStore &&
         error.kind() != CommErrorKind::kInvalid;
}

// "'a' there, 'b' here" for the first line where two descriptions differ.
std::string firstDifference(const std::string& there, const std::string& here) {
  std::istringstream a(there), b(here);
  for (;;) {
    std::string line_a, line_b;
    const bool more_a = static_cast<bool>(std::getline(a, line_a));
    const bool more_b = static_cast<bool>(std::getline(b, line_b));
    if (!more_a && !more_b) return "";
    if (line_a != line_b) return "'" + line_a + "' there, '" + line_b + "' here";
  }
}

ElasticAction actionOf(StepAction action) {
  switch (action) {
    case StepAction::kContinue:
      return ElasticAction::kContinue;
    case StepAction::kCheckpoint:
      return ElasticAction::kCheckpoint;
    case StepAction::kStop:
      return ElasticAction::kStop;
  }
  return ElasticAction::kStop;
}

// An atBoundary() or atEnd() running, for as long as it lives.
struct Inside {
  int& depth;
  explicit Inside(int& d) : depth(d) { ++depth; }
  ~Inside() { --depth; }
};

}  // namespace

struct Elastic::Impl {
  ElasticState state;
  ElasticOptions options;
  std::optional<ElasticSettings> settings;  // in place only
  std::unique_ptr<ElasticGroup> elastic;    // in place
  std::unique_ptr<ProcessGroup> owned;      // otherwise, from the environment
  ProcessGroup* plain = nullptr;            // otherwise: `owned`, the program's, or none (alone)
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> buffers;  // the model's, kept identical by the sync
  std::unique_ptr<DataParallel> sync;
  torch::Tensor kept_residual;  // this member's error feedback across a re-forming
  std::shared_ptr<PreemptionWatcher> watcher;
  std::shared_ptr<StopAgreement> agreement;  // options.stop's choice over `watcher`
  std::vector<int> leaving;                  // the last boundary's noticed ranks
  std::function<void(const Membership&)> on_change;
  std::function<void(const std::string&)> on_failure;
  bool started = false;
  bool has_state = true;  // false for a replacement until a peer sent it the state
  // Whether this member committed a step since start(): until then a failure's re-forming heals
  // every member from one (the start-up's collectives may have run on some members only).
  bool trained = false;
  int64_t step = 0;
  BoundaryVote vote;  // the last agreement's
  // After a failure's re-forming: the step the group trains from, whose boundary is skipped (every
  // member goes on with train(), wherever it was when the failure came).
  int64_t skip_boundary_at = -1;
  Membership membership;  // the last one formed
  bool left = false;      // boundary() returned kLeave
  ElasticTimes times;
  double checkpoint_since = -1;  // a boundary agreed kCheckpoint or kStop then; -1: none pending
  int boundary_depth = 0;        // atBoundary() and atEnd() calls running now (nested: > 1)

  // boundary()'s decision (see there), unaccounted.
  ElasticAction decideBoundary();

  // The program's save after a boundary that agreed on one ends at its next call into Elastic.
  void settleCheckpoint() {
    if (checkpoint_since < 0) return;
    times.checkpoint += seconds() - checkpoint_since;
    checkpoint_since = -1;
  }

  // fn, the program's work between steps, timed in at_boundary: false when a peer's failure in it
  // re-formed the group (if `may_reform`; otherwise, or without recovery in place, the failure is
  // rethrown). Nested in another's fn, it just runs fn: a failure ends the outer one.
  bool betweenSteps(const std::function<void()>& fn, bool may_reform) {
    if (boundary_depth > 0) {
      fn();
      return true;
    }
    const double entered = seconds();
    try {
      const Inside inside(boundary_depth);
      fn();
      times.at_boundary += seconds() - entered;
      return true;
    } catch (const CommError& e) {
      times.at_boundary += seconds() - entered;
      if (!elastic || !recoverable(e) || !may_reform) throw;
      recover(seconds(), e.what());
      return false;
    }
  }

  ProcessGroup& group() {
    if (elastic) return elastic->group();
    if (plain == nullptr) throw std::logic_error("Elastic::group: a world of one has no group");
    return *plain;
  }
  int rank() const { return elastic ? elastic->group().rank() : plain ? plain->rank() : 0; }
  int size() const { return elastic ? elastic->group().size() : plain ? plain->size() : 1; }

  // The notices' watcher: a plain MAX without in-place recovery; in place, an allgather over the
  // current membership that also says who proposed what and whether replacements wait. One for
  // the whole run, so a notice (and its grace deadline) outlives a failure's or a join's
  // re-forming; see renewWatcher for a leave.
  void newWatcher() {
    AgreeMax max = elastic ? AgreeMax([this](int64_t proposal) { return agree(proposal); })
                   : plain != nullptr ? agreeOver(*plain)
                                      : agreeAlone();
    watcher = std::make_shared<PreemptionWatcher>(std::move(max), options.preemption);
    agreement = watcher;
    if (options.stop) {
      agreement = options.stop(watcher);
      if (!agreement) throw std::invalid_argument("ElasticOptions::stop returned no agreement");
    }
  }

  // After others left on a notice, the stayers' watcher has agreed to stop at this step (and took
  // the agreement as a notice of its own, with its grace deadline): a fresh one. A SIGTERM this
  // member got is seen again by it; a notify() between the vote and here is not.
  void renewWatcher() {
    newWatcher();
    agreement->start();
  }

  // bf16 compression's error feedback is this member's own: kept across a re-forming, as
  // cumulus-train keeps it (a healed or new member starts from zero).
  void releaseSync() {
    if (sync != nullptr && options.data_parallel.compression != Compression::kNone &&
        !params.empty()) {
      kept_residual = sync->errorFeedback();
    }
    sync.reset();
  }

  int64_t agree(int64_t proposal) {
    vote = voteAtBoundary(group(), proposal, elastic->joinersWaiting(step));
    return vote.max;
  }

  // Every launch member passes start() the same steps: the step of the checkpoint they all
  // resumed from. One that saw another directory would train from another state.
  void checkSameStep() {
    if (size() == 1) return;
    const torch::Tensor mine = torch::full({1}, step, torch::kInt64);
    const torch::Tensor all = group().allgather(mine).flatten();
    const int64_t lowest = all.min().item<int64_t>(), highest = all.max().item<int64_t>();
    if (lowest != highest) {
      throw std::invalid_argument(
          "the members start from different steps (" + std::to_string(lowest) + " to " +
          std::to_string(highest) + "; this rank " + std::to_string(rank()) + ": " +
          std::to_string(step) + "): every member must resume from the same checkpoint");
    }
  }

  // A launch member's first collectives (see start()). True when they ran to their end; false
  // when a peer was lost on the way (or while the first membership connected) and the group
  // re-formed: its members then hold one member's state, and the collectives are not run again.
  bool launch(double since, const std::function<void()>& prepare) {
    if (elastic && !elastic->connectError().empty()) {
      recover(since, elastic->connectError());
      return false;
    }
    try {
      checkSameStep();
      newSync();
      if (prepare) prepare();
      return true;
    } catch (const CommError& e) {
      if (!elastic || !recoverable(e)) throw;
      recover(since, e.what());
      return false;
    }
  }

  void newSync() {
    releaseSync();
    if (params.empty() || (!elastic && plain == nullptr)) return;  // nothing to sync, or alone
    sync = std::make_unique<DataParallel>(group(), options.data_parallel);
    sync->attach(params, buffers);
    const torch::Tensor mine = std::exchange(kept_residual, torch::Tensor());
    if (mine.defined() && mine.numel() > 0 && sync->errorFeedback().numel() == mine.numel()) {
      sync->setErrorFeedback(mine);
    }
  }

  // The state of step `step` from `source` to the members behind. CheckpointError naming the
  // sender for a state that does not verify, decode or fit; the program's state is untouched
  // until all of it arrived and verified.
  void heal(int source, bool receiving) {
    const bool sending = group().rank() == source;
    std::string packed;
    if (sending) {
      Checkpoint mine = state.capture();
      mine.state.step = static_cast<uint64_t>(step);
      mine.state.config_yaml = state.config;
      packed = packCheckpoint(mine);
    }
    const std::string bytes = broadcastPacked(group(), source, packed);
    if (!receiving) return;
    const std::string from = "the state sent by rank " + std::to_string(source);
    Checkpoint received = unpackCheckpoint(bytes, from);
    if (received.state.config_yaml != state.config) {
      throw CheckpointError(from + " was captured under another configuration (" +
                            firstDifference(received.state.config_yaml, state.config) +
                            "): every member must run with the same one");
    }
    try {
      state.restore(received);
    } catch (const CheckpointError& e) {
      throw CheckpointError(from + ": " + e.what());
    } catch (const std::invalid_argument& e) {  // DistributedSampler::restore's
      throw CheckpointError(from + ": " + e.what());
    }
    step = static_cast<int64_t>(received.state.step);
    has_state = true;
  }

  // The new membership is connected: heal who is behind, rebuild what depends on the membership,
  // tell the program.
  void afterReform(const std::string& cause, double since, const std::string& reason = "") {
    const comm::QuorumEpoch& epoch = elastic->epoch();
    if (epoch.source < 0 && epoch.step < 0 && epoch.epoch > 0) {
      throw std::runtime_error(
          "no member of the re-formed group holds the training state (every survivor is a "
          "replacement); relaunch the job to resume from its newest checkpoint");
    }
    if (epoch.source >= 0) heal(epoch.source, epoch.isStale(group().rank()));
    if (cause == "failure") skip_boundary_at = step;
    if (epoch.isStale(group().rank())) kept_residual = torch::Tensor();  // the state is a peer's
    newSync();
    if (cause == "leave") renewWatcher();
    Membership m;
    m.rank = group().rank();
    m.size = group().size();
    m.epoch = epoch.epoch;
    m.step = step;
    m.cause = cause;
    m.reason = reason;
    m.source = epoch.source;
    m.healed = epoch.stale;
    m.seconds = seconds() - since;
    membership = m;
    if (on_change) on_change(m);
  }

  // After a communication failure: the next membership (again while re-forming fails
  // recoverably), then afterReform.
  void recover(double since, std::string reason) {
    const double entered = seconds();
    ++times.reforms;
    struct Account {  // however recover() ends
      ElasticTimes& times;
      double entered;
      ~Account() { times.reform += seconds() - entered; }
    } account{times, entered};
    if (on_failure) on_failure(reason);
    for (int attempt = 1;; ++attempt) {
      releaseSync();  // it refers to the communicator about to go
      try {
        elastic->reform(has_state ? step : -1, {}, !trained);
        afterReform("failure", since, reason);
        return;
      } catch (const CommError& again) {
        if (!recoverable(again) || attempt >= kMaxReformsWithoutProgress) throw;
        reason += std::string("; then, re-forming: ") + again.what();
      }
    }
  }

  // At a boundary every member reached, with fewer than options.wait_for_members: replacements are
  // admitted until there are enough, rank 0's deadline passes or some member got a notice. Rank
  // 0 blocks on the Store for a join ticket (at most a slice, shorter than the collectives'
  // timeout) while the others wait in the round's allgather; the round carries rank 0's decision.
  void waitForMembers() {
    const double entered = seconds(), reform_before = times.reform;
    struct Account {  // the wait, less the re-formings it admitted members with
      ElasticTimes& times;
      double entered, reform_before;
      ~Account() { times.member_wait += seconds() - entered - (times.reform - reform_before); }
    } account{times, entered, reform_before};
    const double deadline = entered + options.wait_for_members_seconds;
    const auto slice = std::chrono::milliseconds(
        static_cast<int64_t>(std::min(500.0, 250.0 * options.group.timeout_seconds)));
    while (group().size() < options.wait_for_members && group().size() < settings->max_workers) {
      bool go_on = !watcher->noticed();
      bool joiner = false;
      if (group().rank() == 0 && go_on) {
        go_on = seconds() < deadline;
        if (go_on) joiner = elastic->waitForJoiner(slice);
      }
      BoundaryVote round;
      try {
        round = voteAtBoundary(group(), go_on ? 1 : 0, joiner);
      } catch (const CommError& e) {
        if (!recoverable(e)) throw;
        recover(seconds(), e.what());
        return;
      }
      if (std::find(round.proposals.begin(), round.proposals.end(), 0) != round.proposals.end()) {
        return;
      }
      if (round.joiners_waiting) reformAt({}, "join");
      if (skip_boundary_at == step) return;  // a failure while admitting: train next
    }
  }

  // A re-forming agreed at a boundary: `leaving` go, waiting replacements come in.
  void reformAt(const std::vector<int>& leaving, const std::string& cause) {
    const double since = seconds();
    releaseSync();
    try {
      ++times.reforms;
      elastic->reform(step, leaving);
      afterReform(cause, since);
      times.reform += seconds() - since;
    } catch (const CommError& e) {
      if (!recoverable(e)) throw;
      recover(since, e.what());
      if (!leaving.empty()) renewWatcher();  // however the leave's re-forming ended
    }
  }
};

Elastic::Elastic(ElasticState state, ElasticOptions options) : Elastic(std::move(options)) {
  setState(std::move(state));
}

Elastic::Elastic(ElasticOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->settings = elasticSettings(base::systemEnvironment);
  if (impl_->settings) {
    impl_->elastic = std::make_unique<ElasticGroup>(impl_->options.group, *impl_->settings);
    impl_->has_state = !impl_->settings->joining;
  } else {
    impl_->owned = ProcessGroup::fromEnvironment(impl_->options.group);
    impl_->plain = impl_->owned.get();
  }
  impl_->newWatcher();
}

Elastic::Elastic(ProcessGroup* group, ElasticOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->plain = group;
  impl_->newWatcher();
}

Elastic::~Elastic() {
  impl_->agreement.reset();
  impl_->watcher.reset();
  impl_->sync.reset();  // before the group whose communicator it uses
}

void Elastic::setState(ElasticState state) {
  if (impl_->started) throw std::logic_error("Elastic::setState: call it before start()");
  if (!state.capture || !state.restore) {
    throw std::invalid_argument("Elastic: ElasticState needs both capture and restore");
  }
  impl_->state = std::move(state);
}

void Elastic::attach(const std::vector<torch::Tensor>& params,
                     const std::vector<torch::Tensor>& buffers) {
  if (impl_->started) throw std::logic_error("Elastic::attach: call it before start()");
  impl_->params = params;
  impl_->buffers = buffers;
}

void Elastic::onFailure(std::function<void(const std::string&)> callback) {
  impl_->on_failure = std::move(callback);
}

void Elastic::onMembershipChange(std::function<void(const Membership&)> callback) {
  impl_->on_change = std::move(callback);
}

bool Elastic::start(int64_t steps_done, const std::function<void()>& prepare) {
  Impl& m = *impl_;
  if (m.started) throw std::logic_error("Elastic::start: called twice");
  if (!m.state.capture) throw std::logic_error("Elastic::start: call setState() first");
  if (steps_done < 0) throw std::invalid_argument("Elastic::start: steps_done must be >= 0");
  const double since = seconds();
  struct Account {  // start-up, less the re-formings during it
    ElasticTimes& times;
    double since, reform_before;
    ~Account() { times.start += seconds() - since - (times.reform - reform_before); }
  } account{m.times, since, m.times.reform};
  if (!m.elastic || m.elastic->joined()) {
    m.step = steps_done;
    m.started = true;
    const bool whole = m.launch(since, prepare);
    m.agreement->start();
    if (!whole) return true;  // the re-forming told the program (cause "failure")
    Membership first;
    first.rank = rank();
    first.size = size();
    first.step = m.step;
    first.cause = "start";
    first.seconds = seconds() - since;
    m.membership = first;
    if (m.on_change) m.on_change(first);
    return true;
  }
  if (!m.elastic->join()) return false;
  for (int attempt = 1;; ++attempt) {
    try {
      if (attempt > 1) m.elastic->reform(m.has_state ? m.step : -1);
      m.afterReform("join", since);
      m.membership.seconds = seconds() - since;
      break;
    } catch (const CommError& e) {
      // The sender died during the heal, or a member while connecting: nothing was applied, so
      // this member re-forms with whoever is left, still without a state.
      if (!recoverable(e) || attempt >= kMaxReformsWithoutProgress) throw;
      m.releaseSync();
    }
  }
  m.started = true;
  m.trained = true;  // its state is a committed step's, as every member's it joined
  m.agreement->start();
  return true;
}

void Elastic::train(const std::function<void()>& fn) {
  Impl& m = *impl_;
  if (!m.started) throw std::logic_error("Elastic::train: call start() first");
  m.settleCheckpoint();
  const int64_t target = m.step + 1;
  for (int reforms = 0;;) {
    const double attempt = seconds();
    DataParallel* sync = m.sync.get();
    const uint64_t synced = sync != nullptr ? sync->lastStep().steps : 0;
    try {
      fn();
      m.step = target;
      m.trained = true;
      m.times.train += seconds() - attempt;
      if (sync != nullptr && sync == m.sync.get()) {
        const SyncStepStats stats = sync->lastStep();
        if (stats.steps > synced) m.times.comm_wait += stats.comm_wait_seconds;
      }
      return;
    } catch (const CommError& e) {
      m.times.redone += seconds() - attempt;
      if (!m.elastic || !recoverable(e) || ++reforms > kMaxReformsWithoutProgress) throw;
      m.recover(seconds(), e.what());
      // A survivor had committed the step: its state, which came along, is the step's.
      if (m.step >= target) return;
    }
  }
}

ElasticAction Elastic::boundary() {
  Impl& m = *impl_;
  if (!m.started) throw std::logic_error("Elastic::boundary: call start() first");
  m.settleCheckpoint();
  struct Account {  // the agreement, less re-forming and waiting for members; a save pending after
    Impl& m;
    double entered, reform_before, wait_before;
    ElasticAction action = ElasticAction::kContinue;
    ~Account() {
      m.times.boundary += seconds() - entered - (m.times.reform - reform_before) -
                          (m.times.member_wait - wait_before);
      if (action == ElasticAction::kCheckpoint || action == ElasticAction::kStop) {
        m.checkpoint_since = seconds();
      }
      if (action == ElasticAction::kLeave) m.left = true;
    }
  } account{m, seconds(), m.times.reform, m.times.member_wait};
  const ElasticAction action = m.decideBoundary();
  account.action = action;
  return action;
}

ElasticAction Elastic::Impl::decideBoundary() {
  Impl& m = *this;
  m.leaving.clear();
  if (!m.elastic) return actionOf(m.agreement->decide(m.step));
  if (m.step == m.skip_boundary_at) return ElasticAction::kContinue;
  StepAction action = StepAction::kContinue;
  try {
    action = m.agreement->decide(m.step);
  } catch (const CommError& e) {
    if (!recoverable(e)) throw;
    m.recover(seconds(), e.what());
    return ElasticAction::kContinue;  // a notice seen meanwhile is agreed at the next boundary
  }
  if (action == StepAction::kStop) {
    m.leaving = m.vote.noticed();
    const int64_t staying = m.size() - static_cast<int64_t>(m.leaving.size());
    if (m.leaving.empty() || staying < 1 || staying < m.settings->min_workers) {
      return ElasticAction::kStop;
    }
    if (std::find(m.leaving.begin(), m.leaving.end(), m.rank()) != m.leaving.end()) {
      m.elastic->leave("preempted at step " + std::to_string(m.step));
      return ElasticAction::kLeave;
    }
    const std::vector<int> leaving = m.leaving;
    m.reformAt(leaving, "leave");
    return ElasticAction::kContinue;
  }
  if (action != StepAction::kContinue) return actionOf(action);  // replacements come in later
  if (m.vote.joiners_waiting) m.reformAt({}, "join");
  if (m.step != m.skip_boundary_at && m.options.wait_for_members > m.size()) m.waitForMembers();
  return ElasticAction::kContinue;
}

bool Elastic::atBoundary(const std::function<void()>& fn) {
  Impl& m = *impl_;
  if (!m.started) throw std::logic_error("Elastic::atBoundary: call start() first");
  if (m.boundary_depth == 0 && m.elastic && m.step == m.skip_boundary_at) return false;
  m.settleCheckpoint();
  return m.betweenSteps(fn, true);
}

void Elastic::atEnd(const std::function<void()>& fn) {
  Impl& m = *impl_;
  if (!m.started) throw std::logic_error("Elastic::atEnd: call start() first");
  m.settleCheckpoint();
  for (int reforms = 0; !m.betweenSteps(fn, reforms < kMaxReformsWithoutProgress);) ++reforms;
}

const std::vector<int>& Elastic::leaving() const { return impl_->leaving; }

void Elastic::waitForAll() {
  impl_->settleCheckpoint();
  impl_->agreement->waitForAll();
}

void Elastic::finish() {
  if (impl_->elastic && rank() == 0) impl_->elastic->finish(impl_->step);
}

bool Elastic::inPlace() const { return impl_->elastic != nullptr; }
bool Elastic::inPlaceRequested() { return elasticSettings(base::systemEnvironment).has_value(); }

std::string Elastic::memberId() const {
  return impl_->settings ? impl_->settings->member_id : std::string();
}

bool Elastic::joining() const { return impl_->elastic && !impl_->elastic->joined(); }
int Elastic::rank() const { return impl_->rank(); }
int Elastic::size() const { return impl_->size(); }
int64_t Elastic::epoch() const { return impl_->elastic ? impl_->elastic->epoch().epoch : 0; }
int64_t Elastic::step() const { return impl_->step; }
const Membership& Elastic::membership() const { return impl_->membership; }
bool Elastic::left() const { return impl_->left; }
const ElasticTimes& Elastic::times() const { return impl_->times; }
ProcessGroup& Elastic::group() { return impl_->group(); }

GradientSync& Elastic::sync() {
  if (!impl_->sync) {
    throw std::logic_error(
        "Elastic::sync: call attach() with the parameters (over a group) and start() first");
  }
  return *impl_->sync;
}

PreemptionWatcher& Elastic::preemption() { return *impl_->watcher; }

}  // namespace cumulus
