// Recovery in place (`launch.recovery: in_place`): the trainer's side of comm/quorum.h. After a
// communication failure the survivors agree on the next epoch, the members whose state is behind
// (a rank that failed before its optimizer step while another finished it, a joiner) take the
// whole training state from a live peer over the new communicator, and training goes on from the
// newest step any survivor completed. At an agreed step boundary ranks that got a notice leave and
// waiting joiners are let in the same way. Nothing restarts and nothing is read from disk.

#include <torch/torch.h>

#include <chrono>
#include <string>

#include "api/elastic_group.h"
#include "cumulus/data_parallel.h"
#include "cumulus/errors.h"
#include "cumulus/process_group.h"
#include "checkpoint/resume.h"
#include "trainer/trainer_impl.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

// Re-formings in a row without a step trained in between before the trainer gives up.
constexpr int kMaxReformsWithoutProgress = 16;
int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string joined(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  return text;
}

}  // namespace

bool Trainer::Impl::recoverable(const cumulus::CommError& error) const {
  // A wrong token fails the same way on every retry; without node 0's Store no epoch can form.
  return error.kind() != CommErrorKind::kUnauthorized && error.kind() != CommErrorKind::kStore;
}

int64_t Trainer::Impl::recover(const cumulus::CommError& error) {
  const double started = now();
  const int64_t detected = unixMillis();
  recorder_->warning("rank " + std::to_string(env_.rank) + ": " + error.what() +
                     "; re-forming the group in place from step " + std::to_string(steps_done_));
  // The gradient sync refers to the communicator that is about to go: drop it first.
  releaseSync();
  for (int attempt = 1;; ++attempt) {
    try {
      elastic_->reform(has_state_ ? steps_done_ : -1);
      afterReform(started, true, "failure", detected);
      break;
    } catch (const cumulus::CommError& again) {
      if (!recoverable(again) || attempt >= kMaxReformsWithoutProgress) throw;
      recorder_->warning("rank " + std::to_string(env_.rank) + ": re-forming failed (" +
                         again.what() + "); trying again");
      releaseSync();
    }
  }
  if (env_.world_size < elastic_->settings().min_workers) {
    recorder_->warning("warning: the group went on with " + std::to_string(env_.world_size) +
                       " workers, fewer than the " +
                       std::to_string(elastic_->settings().min_workers) + " --nnodes asks for");
  }
  return steps_done_;
}

bool Trainer::Impl::joinGroup() {
  if (elastic_->joined()) return true;
  const double started = now();
  const int64_t detected = unixMillis();
  if (!elastic_->join()) return false;
  for (int attempt = 1;; ++attempt) {
    try {
      if (attempt > 1) elastic_->reform(has_state_ ? steps_done_ : -1);
      afterReform(started, false, "join", detected);  // run() begins the records after this
      break;
    } catch (const cumulus::CommError& e) {
      // The sender died during the heal, or a member while connecting: this rank has applied
      // nothing, so it re-forms with whoever is left, still without a state.
      if (!recoverable(e) || attempt >= kMaxReformsWithoutProgress) throw;
      resume_notes_.push_back(std::string("warning: joining failed (") + e.what() +
                              "); re-forming");
      releaseSync();
    }
  }
  start_step_ = steps_done_;
  return true;
}

void Trainer::Impl::reformAt(int64_t /*done*/, const std::vector<int>& leaving) {
  const double started = now();
  const int64_t detected = unixMillis();
  releaseSync();
  elastic_->reform(has_state_ ? steps_done_ : -1, leaving);
  afterReform(started, true, leaving.empty() ? "join" : "leave", detected);
}

// The new epoch is connected: take the state if this rank is behind, then rebuild everything that
// depends on the rank and the world size.
void Trainer::Impl::afterReform(double started, bool begin_records, const std::string& cause,
                                int64_t detected_unix_ms) {
  const comm::QuorumEpoch& epoch = elastic_->epoch();
  cumulus::ProcessGroup& group = elastic_->group();
  const int64_t old_rank = env_.rank;
  const int64_t old_world = env_.world_size;
  env_.rank = group.rank();
  env_.world_size = group.size();
  env_.generation = static_cast<int64_t>(group.generation());
  group_ = group.size() > 1 ? &group : nullptr;
  if (writes()) claimRunDir();  // the new writer (a survivor or joiner that became rank 0)
  if (epoch.source < 0 && epoch.step < 0 && epoch.epoch > 0) {
    // Not a TrainError: a restart resumes from the newest checkpoint, so it is worth one.
    throw std::runtime_error(
        "no member of the re-formed group holds the training state (every survivor "
        "is a joiner); restart the job to resume from the newest checkpoint");
  }
  if (epoch.source >= 0) transferState(epoch.source, epoch.isStale(static_cast<int>(env_.rank)));
  batches_->reshard(env_.rank, env_.world_size);
  batches_->restore(done_position_);
  std::vector<std::string> share_warnings;
  resetShares(share_warnings);
  sync_ = makeSync(config_, group_, options_.trace);
  distributed_ = dynamic_cast<DataParallel*>(sync_.get());
  sync_->attach(params_);
  restoreResiduals();
  buildGroupParts();
  if (begin_records) {
    recorder_->begin(RunStart{"", {}, steps_done_, total_steps_, batches_->stepsPerEpoch()});
    for (const std::string& w : share_warnings) recorder_->warning(w);
    recordShares("reform", steps_done_);
    stop_->start();
  } else {
    resume_notes_.insert(resume_notes_.end(), share_warnings.begin(), share_warnings.end());
  }
  const double ms = 1000.0 * (now() - started);
  ReformRecord record;
  record.cause = cause;
  record.step = steps_done_;
  record.epoch = epoch.epoch;
  record.world_size = env_.world_size;
  record.detected_unix_ms = detected_unix_ms;
  record.reform_ms = ms;
  reform_record_ = record;
  char took[32];
  std::snprintf(took, sizeof(took), "%.0f ms", ms);
  const std::string from =
      old_rank == env_.rank && old_world == env_.world_size
          ? ""
          : " (was rank " + std::to_string(old_rank) + " of " + std::to_string(old_world) + ")";
  std::string line = "re-formed in place: epoch " + std::to_string(epoch.epoch) + ", rank " +
                     std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) + from +
                     ", training from step " + std::to_string(steps_done_) + " in " + took;
  if (!epoch.stale.empty()) {
    line += "; state sent by rank " + std::to_string(epoch.source) + " to rank(s) " +
            joined(epoch.stale);
  }
  if (begin_records) {
    recorder_->warning(line);
  } else {
    resume_notes_.push_back(line);  // a joiner's records begin after this
  }
}

// The training state travels as a checkpoint does (packCheckpoint: the files of a checkpoint
// directory behind their MANIFEST), in two broadcasts from `source`: its size, then its bytes. The
// receiver verifies every size and SHA-256 and decodes before anything of its own state changes.
void Trainer::Impl::transferState(int source, bool receiving) {
  cumulus::ProcessGroup& group = elastic_->group();
  const bool sending = env_.rank == source;
  std::string packed;
  if (sending) {
    TrainingPosition position;
    position.steps_done = steps_done_;
    position.sampler = done_position_;
    position.samples_seen = samples_seen_;
    position.learning_rate = schedule_->lr(std::max<int64_t>(0, steps_done_ - 1));
    position.grad_accumulation = grad_accumulation_;
    packed = packCheckpoint(captureCheckpoint(*model_, *optimizer_, config_, env_, position));
    char mb[32];
    std::snprintf(mb, sizeof(mb), "%.1f MB", static_cast<double>(packed.size()) / 1e6);
    recorder_->note("rank " + std::to_string(env_.rank) + " sends the training state of step " +
                    std::to_string(steps_done_) + " (" + mb + ")");
  }
  const std::string from = "the training state sent by rank " + std::to_string(source);
  std::string arrived;
  try {
    arrived = broadcastPacked(group, source, packed);
  } catch (const CheckpointError& e) {
    throw std::runtime_error(e.what());
  }
  if (!receiving) return;

  // Everything arrived: only now does this rank's state change, and only if all of it decodes
  // and fits. Not a TrainError: another transfer may well be good.
  Checkpoint state;
  try {
    state = unpackCheckpoint(arrived, from);
    restoreTraining(state, *model_, *optimizer_, from);
  } catch (const CheckpointError& e) {
    throw std::runtime_error(e.what());
  } catch (const ResumeError& e) {
    throw std::runtime_error(e.what());
  }
  has_state_ = true;
  steps_done_ = static_cast<int64_t>(state.state.step);
  done_position_ = state.sampler();
  samples_seen_ = state.state.samples_seen;
  grad_accumulation_ = state.state.grad_accumulation;
}

bool Trainer::Impl::leaveOrStay(int64_t done, StepAction& action, RunResult& result) {
  if (action != StepAction::kStop) return false;
  const std::vector<int> leaving = vote_.noticed();
  const int64_t staying = env_.world_size - static_cast<int64_t>(leaving.size());
  if (staying < 1 || staying < elastic_->settings().min_workers) {
    recorder_->note("preemption notice for rank(s) " + joined(leaving) + ": " +
                    std::to_string(staying) + " worker(s) would remain (at least " +
                    std::to_string(elastic_->settings().min_workers) +
                    " needed), so every rank checkpoints and stops");
    return false;  // the restart path: checkpoint this step, exit 75
  }
  const bool me =
      std::find(leaving.begin(), leaving.end(), static_cast<int>(env_.rank)) != leaving.end();
  if (me) {
    elastic_->leave("preempted at step " + std::to_string(done));
    result.preempted = true;
    result.left = true;
    result.steps = done;
    recorder_->warning("preempted at step " + std::to_string(done) + ": rank " +
                       std::to_string(env_.rank) + " leaves the group, which trains on with " +
                       std::to_string(staying) + " worker(s); no checkpoint needed");
    return true;
  }
  reformAt(done, leaving);
  action = StepAction::kContinue;
  return false;
}

AgreeMax Trainer::Impl::inPlaceVote() {
  return [this](int64_t proposal) {
    vote_ = voteAtBoundary(elastic_->group(), proposal, elastic_->joinersWaiting(steps_done_));
    return vote_.max;
  };
}

void Trainer::Impl::recordReform() {
  if (!reform_record_) return;
  reform_record_->next_step_unix_ms = unixMillis();
  recorder_->reformed(*reform_record_);
  reform_record_.reset();
}

void Trainer::Impl::finishGroup() { elastic_->finish(total_steps_); }

}  // namespace cumulus::trainer
