// Recovery in place (`launch.recovery: in_place`), the trainer's side of the public Elastic
// (<cumulus/elastic.h>): what the training state is (a checkpoint's contents, packed and verified
// the same way), how a member behind takes it, and what the trainer rebuilds after the membership
// changed (the data's shards, the batch shares, the parts that know the rank, the records). The
// re-forming itself, the heal and the boundary's agreement are Elastic's, as for any program.

#include <torch/torch.h>

#include <string>

#include "cumulus/data_parallel.h"
#include "cumulus/elastic.h"
#include "cumulus/process_group.h"
#include "trainer/diloco_state.h"
#include "trainer/diloco_training.h"
#include "trainer/resume.h"
#include "trainer/trainer_impl.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {

std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  return text;
}

// Called on the live peer that sends it: the state after steps_done_ steps, as a checkpoint of
// this step would hold it.
Checkpoint Trainer::Impl::captureState() {
  TrainingPosition position;
  position.steps_done = steps_done_;
  position.sampler = done_position_;
  position.samples_seen = samples_seen_;
  position.learning_rate = schedule_->lr(std::max<int64_t>(0, steps_done_ - 1));
  position.grad_accumulation = grad_accumulation_;
  RunEnv now = env_;
  now.rank = elastic_->rank();
  now.world_size = elastic_->size();
  const std::string sends = "rank " + std::to_string(now.rank) +
                            " sends the training state of step " + std::to_string(steps_done_);
  records_.note(sends);  // a re-forming during start-up: kept until the records begin
  Checkpoint state = captureCheckpoint(*model_, *optimizer_, config_, now, position);
  if (diloco_) addDiloco(state, *diloco_, *model_);
  return state;
}

// Everything arrived and verified (Elastic checked the sizes, the SHA-256s and the config): the
// model and optimizer take it only if all of it fits them (restoreTraining checks first).
void Trainer::Impl::restoreState(const Checkpoint& state) {
  try {
    restoreTraining(state, *model_, *optimizer_, "");  // Elastic names the sender
    // DiLoCo: the sender's global parameters and momentum; this replica starts from the global
    // parameters, with the sender's inner optimizer and no residual.
    if (diloco_) restoreDilocoState(state, *diloco_, params_, "", records_.pending());
  } catch (const ResumeError& e) {
    throw CheckpointError(e.what());
  }
  has_state_ = true;
  steps_done_ = static_cast<int64_t>(state.state.step);
  done_position_ = state.sampler();
  samples_seen_ = state.state.samples_seen;
  grad_accumulation_ = state.state.grad_accumulation;
}

void Trainer::Impl::failureSeen(const std::string& reason) {
  markPhase(StepPhase::kIdle);  // the re-forming has its own timeouts
  ++reforms_;
  const std::string line = "rank " + std::to_string(env_.rank) + ": " + reason +
                           "; re-forming the group in place from step " +
                           std::to_string(steps_done_);
  records_.warning(line);
}

// The membership formed (start) or changed: every part that knows the rank or the world size is
// rebuilt, with the state (this member's own, or the one a peer just sent) already in place.
void Trainer::Impl::membershipChanged(const Membership& m) {
  if (!inPlace()) return;  // one membership, and the Trainer's own gradient sync
  if (!diloco_) {          // DiLoCo's inner steps keep the Trainer's own (local) gradient sync
    sync_ = &elastic_->sync();
    distributed_ = dynamic_cast<DataParallel*>(sync_);
  }
  const int64_t old_rank = env_.rank;
  const int64_t old_world = env_.world_size;
  if (m.cause != "start") {
    env_.rank = m.rank;
    env_.world_size = m.size;
    env_.generation = static_cast<int64_t>(elastic_->group().generation());
    group_ = m.size > 1 ? &elastic_->group() : nullptr;
  }
  if (m.cause == "start") {  // build() made the other parts for this membership
    checkpoints_->setMembership(writes(), env_.rank, env_.world_size, group_, distributed_);
    return;
  }
  // The new writer (a survivor or joiner that became rank 0) holds the run directory from now on.
  if (writes()) checkpoints_->claimRunDir(env_.run_id, records_.pending());
  batches_->reshard(env_.rank, env_.world_size);
  batches_->restore(done_position_);
  std::vector<std::string> share_warnings;
  shares_->reset(env_.world_size, share_warnings);
  buildGroupParts();
  // The new membership's recorder begins where the group trains from (a joiner's records begin
  // in run(), with what was kept).
  if (records_.begun()) {
    records_.recorder().begin(
        RunStart{"", {}, steps_done_, total_steps_, batches_->stepsPerEpoch()});
  }
  for (const std::string& w : share_warnings) records_.warning(w);
  if (records_.begun()) {
    shares_->record("reform", steps_done_, env_.world_size, records_.recorder());
  }
  const double ms = 1000.0 * m.seconds;
  ReformRecord record;
  record.cause = m.cause;
  record.step = steps_done_;
  record.epoch = m.epoch;
  record.world_size = env_.world_size;
  record.reform_ms = ms;
  records_.reformed(record);
  char took[32];
  std::snprintf(took, sizeof(took), "%.0f ms", ms);
  const std::string from =
      old_rank == env_.rank && old_world == env_.world_size
          ? ""
          : " (was rank " + std::to_string(old_rank) + " of " + std::to_string(old_world) + ")";
  std::string line = "re-formed in place: epoch " + std::to_string(m.epoch) + ", rank " +
                     std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) + from +
                     ", training from step " + std::to_string(steps_done_) + " in " + took;
  if (!m.healed.empty()) {
    line +=
        "; state sent by rank " + std::to_string(m.source) + " to rank(s) " + rankList(m.healed);
  }
  records_.warning(line);  // a joiner's records begin after this
}

}  // namespace cumulus::trainer
