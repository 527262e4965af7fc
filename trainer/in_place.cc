// Recovery in place (`launch.recovery: in_place`), the trainer's side of the public Elastic
// (<cumulus/elastic.h>): what the training state is (a checkpoint's contents, packed and verified
// the same way), how a member behind takes it, and what the trainer rebuilds after the membership
// changed (the data's shards, the batch shares, the parts that know the rank, the records). The
// re-forming itself, the heal and the boundary's agreement are Elastic's, as for any program.

#include <torch/torch.h>

#include <string>

#include "configs/parse.h"
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

void InPlaceRecovery::connect() {
  ElasticState state;
  state.capture = [this] { return captureState(); };
  state.restore = [this](const Checkpoint& checkpoint) { restoreState(checkpoint); };
  state.config = configs::toYaml(parts_.config);
  parts_.elastic->setState(std::move(state));
  parts_.elastic->onFailure([this](const std::string& reason) { failureSeen(reason); });
  parts_.elastic->onMembershipChange([this](const Membership& m) { membershipChanged(m); });
}

// Called on the live peer that sends it: the state after the steps it has taken, as that step's
// checkpoint would hold it.
Checkpoint InPlaceRecovery::captureState() {
  const int64_t done = parts_.progress.steps_done;
  RunEnv now = parts_.env;
  now.rank = parts_.elastic->rank();
  now.world_size = parts_.elastic->size();
  // A re-forming during start-up: kept until the records begin.
  parts_.note("rank " + std::to_string(now.rank) + " sends the training state of step " +
              std::to_string(done));
  return parts_.checkpointAt(now, done, parts_.schedule->lr(std::max<int64_t>(0, done - 1)), false);
}

// Everything arrived and verified (Elastic checked the sizes, the SHA-256s and the config): the
// model and optimizer take it only if all of it fits them (restoreTraining checks first).
void InPlaceRecovery::restoreState(const Checkpoint& state) {
  try {
    restoreTraining(state, *parts_.model, *parts_.optimizer, "");  // Elastic names the sender
    // DiLoCo: the sender's global parameters and momentum; this replica starts from the global
    // parameters, with the sender's inner optimizer and no residual.
    if (parts_.diloco) restoreDilocoState(state, *parts_.diloco, parts_.params, "", parts_.pending);
  } catch (const ResumeError& e) {
    throw CheckpointError(e.what());
  }
  parts_.progress.steps_done = static_cast<int64_t>(state.state.step);
  parts_.progress.sampler = state.sampler();
  parts_.progress.samples_seen = state.state.samples_seen;
  parts_.progress.grad_accumulation = state.state.grad_accumulation;
}

void InPlaceRecovery::failureSeen(const std::string& reason) {
  parts_.markPhase(StepPhase::kIdle);  // the re-forming has its own timeouts
  ++reforms_;
  const std::string line = "rank " + std::to_string(parts_.env.rank) + ": " + reason +
                           "; re-forming the group in place from step " +
                           std::to_string(parts_.progress.steps_done);
  parts_.warning(line);
}

// The membership formed (start) or changed: every part that knows the rank or the world size is
// rebuilt, with the state (this member's own, or the one a peer just sent) already in place.
void InPlaceRecovery::membershipChanged(const Membership& m) {
  if (!parts_.inPlace()) return;  // one membership, and the Trainer's own gradient sync
  if (!parts_.diloco) {  // DiLoCo's inner steps keep the Trainer's own (local) gradient sync
    parts_.sync = &parts_.elastic->sync();
    parts_.distributed = dynamic_cast<DataParallel*>(parts_.sync);
  }
  if (m.cause != "start") {
    parts_.env.rank = m.rank;
    parts_.env.world_size = m.size;
    parts_.env.generation = static_cast<int64_t>(parts_.elastic->group().generation());
    parts_.group = m.size > 1 ? &parts_.elastic->group() : nullptr;
  }
  if (m.cause == "start") {  // build() made the other parts for this membership
    parts_.checkpoints->setMembership(parts_.writes(), parts_.env.rank, parts_.env.world_size,
                                      parts_.group, parts_.distributed);
    return;
  }
  // The new writer (a survivor or joiner that became rank 0) holds the run directory from now on.
  if (parts_.writes()) parts_.checkpoints->claimRunDir(parts_.env.run_id, parts_.pending);
  parts_.batches->reshard(parts_.env.rank, parts_.env.world_size);
  parts_.batches->restore(parts_.progress.sampler);
  std::vector<std::string> share_warnings;
  parts_.shares->reset(parts_.env.world_size, share_warnings);
  rebuild_group_parts_();
  // The records follow the new membership now: its "reform" record and line (a joiner's records
  // begin in run(), and say it then), what the change found, and the shares it starts with.
  if (parts_.recorder) parts_.recorder->membershipChanged();
  for (const std::string& w : share_warnings) parts_.warning(w);
  parts_.flushPending();
  if (parts_.recorder) parts_.shares->record("reform", parts_.env.world_size, *parts_.recorder);
}

}  // namespace cumulus::trainer
