// RunCheckpoints (run_checkpoints.h): the run's checkpoints and the guards around them.
#include "trainer/run_checkpoints.h"

#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "checkpoint/checkpoint_manifest.h"
#include "configs/digest.h"
#include "cumulus/data_parallel.h"
#include "cumulus/errors.h"
#include "cumulus/process_group.h"
#include "cumulus/recorder.h"
#include "cumulus/run_directory.h"
#include "models/model.h"
#include "trainer/diloco_state.h"
#include "trainer/rank_reduce.h"
#include "trainer/resume.h"
#include "trainer/state_dict.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

namespace fs = std::filesystem;

// Whether `inner` is `outer` or lies below it (by their absolute, normalized paths).
bool within(const std::string& inner, const std::string& outer) {
  const fs::path relative = fs::weakly_canonical(fs::absolute(inner))
                                .lexically_relative(fs::weakly_canonical(fs::absolute(outer)));
  return !relative.empty() && *relative.begin() != "..";
}

// Removes every step-N and step-N.tmp directory of `dir`; returns how many.
int removeCheckpointDirs(const std::string& dir) {
  int removed = 0;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const bool temporary = name.rfind("step-", 0) == 0 && name.size() > 4 &&
                           name.compare(name.size() - 4, 4, ".tmp") == 0;
    if (!checkpoint::checkpointDirStep(name) && !temporary) continue;
    std::error_code failed;
    fs::remove_all(it->path(), failed);
    if (failed) {
      throw cumulus::UserError(it->path().string() +
                               ": cannot remove it for --overwrite: " + failed.message());
    }
    ++removed;
  }
  if (error) throw cumulus::UserError(dir + ": cannot list it for --overwrite: " + error.message());
  return removed;
}

uint64_t bytesOf(const checkpoint::NamedTensors& tensors) {
  uint64_t bytes = 0;
  for (const auto& [name, t] : tensors) {
    bytes += static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(t.element_size());
  }
  return bytes;
}

}  // namespace

RunCheckpoints::RunCheckpoints(const configs::Experiment& config, const TrainerOptions& options,
                               bool writer, const std::unique_ptr<Recorder>& recorder,
                               std::function<Checkpoint(int64_t, double, bool)> capture)
    : config_(config),
      options_(options),
      recorder_(recorder),
      capture_(std::move(capture)),
      dir_(config.checkpoint.dir.empty() ? config.trainer.run_dir + "/checkpoints"
                                         : config.checkpoint.dir),
      store_(std::make_unique<Checkpoints>(
          dir_, static_cast<size_t>(std::max<int64_t>(1, config.checkpoint.keep)))),
      writer_(writer) {}

RunCheckpoints::~RunCheckpoints() = default;

std::string RunCheckpoints::pathOf(int64_t step) const {
  return dir_ + "/" + Checkpoints::dirName(static_cast<uint64_t>(step));
}

void RunCheckpoints::setMembership(bool writer, int64_t rank, int64_t world, ProcessGroup* group,
                                   DataParallel* sync) {
  rank_ = rank;
  world_ = world;
  group_ = world > 1 ? group : nullptr;
  sync_ = sync;
  // A checkpoint when one is due, written by rank 0 alone (the replicas are identical).
  if (policy_ && writer_ == writer) return;
  checkpoint::CheckpointSchedule schedule(config_.checkpoint.every_steps,
                                          config_.checkpoint.every_seconds, options_.clock);
  auto standard = std::make_shared<ScheduledCheckpointPolicy>(std::move(schedule), writer,
                                                              config_.checkpoint.async);
  policy_ = standard;
  if (options_.checkpoint_policy) {
    policy_ = options_.checkpoint_policy(std::move(standard));
    if (!policy_) {
      throw SetupError(
          "TrainerOptions::checkpoint_policy returned no part; return the default it is given to "
          "keep it");
    }
  }
  writer_ = writer;
}

void RunCheckpoints::claimRunDir(const std::string& run_id, std::vector<std::string>& notes) {
  // An empty run_dir (the library's, not a config's: the schema refuses it) writes nothing here.
  if (run_dir_lock_ || config_.trainer.run_dir.empty()) return;
  RunDirectoryLockOptions options;
  options.run_id = run_id;
  options.program = "cumulus-train";
  run_dir_lock_.emplace(config_.trainer.run_dir, options);
  if (!run_dir_lock_->note().empty()) notes.push_back("note: " + run_dir_lock_->note());
  if (!within(dir_, config_.trainer.run_dir)) {
    checkpoint_dir_lock_.emplace(dir_, options);
    if (!checkpoint_dir_lock_->note().empty()) {
      notes.push_back("note: " + checkpoint_dir_lock_->note());
    }
  }
}

void RunCheckpoints::releaseRunDir() noexcept {
  try {
    store_->waitForPending();
  } catch (const std::exception& e) {
    // run() already failed, or is ending with the error it collected: this one is only told.
    try {
      if (recorder_) recorder_->warning(std::string("warning: checkpoint failed: ") + e.what());
    } catch (...) {
    }
  }
  checkpoint_dir_lock_.reset();
  run_dir_lock_.reset();
}

bool RunCheckpoints::guardOtherExperiment(bool resuming, std::vector<std::string>& notes) {
  const std::optional<CheckpointOrigin> origin = newestCheckpointOrigin(dir_);
  if (!origin) return false;
  const std::vector<std::string> changes = otherExperimentChanges(config_, origin->state);
  if (changes.empty()) return false;
  const std::string whose = dir_ + " holds checkpoints of another experiment (newest " +
                            origin->path + ", config digest " + origin->state.config_digest +
                            "; this experiment's is " + configs::configDigest(config_) + ")";
  if (options_.overwrite) {
    const int removed = writer_ ? removeCheckpointDirs(dir_) : 0;
    notes.push_back("--overwrite: " + whose + "; removed " + std::to_string(removed) +
                    " checkpoint director" + (removed == 1 ? "y" : "ies") +
                    ", starting from step 0");
    return true;
  }
  // A resume refuses it in planResume, listing the keys, unless --allow-config-change.
  if (resuming) return false;
  std::string text = whose + ", which differs in " + std::to_string(changes.size()) +
                     (changes.size() == 1 ? " key:" : " keys:");
  for (const std::string& line : changes) text += "\n  " + line;
  text +=
      "\nresume it with --resume auto (and --allow-config-change to continue with the new "
      "values); or " +
      std::string(kOtherExperimentChoices);
  throw ExperimentMismatch(text);
}

void RunCheckpoints::checkRoom(models::Model& model, int64_t world) {
  if (config_.trainer.run_dir.empty() && config_.checkpoint.dir.empty()) return;  // see claimRunDir
  // model.pt holds the parameters and buffers; optim.pt one tensor per parameter and slot (SGD's
  // momentum buffer, AdamW's two moments). 64 KiB covers state.pb, the MANIFEST and pickling.
  const uint64_t parameters = bytesOf(model.namedParameters());
  const uint64_t buffers = bytesOf(model.namedBuffers());
  const auto& o = config_.optimizer;
  const uint64_t slots = o.name == configs::OptimizerName::kAdamw ? 2 : (o.momentum > 0 ? 1 : 0);
  uint64_t each = parameters * (1 + slots) + buffers + 64 * 1024;
  // trainer.sync diloco adds diloco.pt (the outer momentum) and diloco_replicas.pt: every rank's
  // replica, inner optimizer slots and residual, [world, n].
  if (config_.trainer.sync == configs::SyncMode::kDiloco) {
    each += static_cast<uint64_t>(parameters) * (1 + static_cast<uint64_t>(world) * (2 + slots));
  }
  // comm.compression bf16 adds comm_residual.pt: every rank's float32 residuals, [world, n].
  if (config_.comm.compression == Compression::kBf16 && world > 1) {
    each += static_cast<uint64_t>(world) * static_cast<uint64_t>(model.parameterCount()) *
            sizeof(float);
  }
  try {
    store_->checkRoom(each, "checkpoint.keep");
  } catch (const UserError& e) {
    throw SetupError(std::string(e.what()) +
                     " (checkpoint.dir; by default <trainer.run_dir>/checkpoints)");
  }
}

void RunCheckpoints::resumed(int64_t step, torch::Tensor residuals) {
  last_saved_step_ = step;
  resumed_residuals_ = std::move(residuals);
}

void RunCheckpoints::setRankState(std::function<torch::Tensor()> mine) {
  rank_state_ = std::move(mine);
}

bool RunCheckpoints::gathersRanks() const { return rank_state_ ? true : compressing(); }

bool RunCheckpoints::compressing() const {
  return sync_ != nullptr && group_ != nullptr && config_.comm.compression == Compression::kBf16;
}

void RunCheckpoints::restoreResiduals(std::vector<std::string>& notes) {
  const torch::Tensor saved = std::exchange(resumed_residuals_, torch::Tensor());
  if (!saved.defined()) return;
  if (!compressing()) {
    notes.push_back(config_.comm.compression == Compression::kNone
                        ? "warning: comm.compression is none: the checkpoint's error-feedback "
                          "residuals are dropped"
                        : "comm.compression: a world of one sends nothing; the checkpoint's "
                          "error-feedback residuals are dropped");
    return;
  }
  std::string note;
  const torch::Tensor mine =
      residualForRank(saved, static_cast<int>(rank_), static_cast<int>(world_), &note);
  if (!note.empty()) notes.push_back(note);
  if (!mine.defined()) return;
  try {
    sync_->setErrorFeedback(mine);
  } catch (const std::invalid_argument& e) {
    throw SetupError(std::string("comm.compression: the saved error-feedback residuals do not fit "
                                 "this model (") +
                     e.what() + "); resume with --resume none or remove " + kResidualFile);
  }
}

CheckpointDecision RunCheckpoints::dueAtStepEnd(int64_t done, bool last) {
  const CheckpointDecision mine = policy_->atStepEnd(done, last);
  if (!gathersRanks()) return mine;
  const auto& c = config_.checkpoint;
  bool any_saves;
  if (!options_.checkpoint_policy && c.every_seconds <= 0) {
    // The default policy on the step grid: every rank knows what the writer decides.
    any_saves = c.every_steps > 0 && (last || done % c.every_steps == 0);
  } else {
    any_saves = maxOverRanks(group_, mine.kind == CheckpointDecision::Kind::kSave ? 1 : 0) > 0;
  }
  if (any_saves) gatherResiduals(done);
  return mine;
}

CheckpointDecision RunCheckpoints::dueAfterAgreement(int64_t done, StepAction action) {
  // Every rank knows the agreed action: a requested checkpoint or a stop saves this step.
  if (gathersRanks() && action != StepAction::kContinue) gatherResiduals(done);
  return policy_->afterAgreement(done, action);
}

void RunCheckpoints::gatherResiduals(int64_t done) {
  if (residuals_step_ == done) return;  // the residuals change only in a step
  if (rank_state_) {
    residuals_ = group_ != nullptr ? group_->allgather(rank_state_()) : rank_state_().unsqueeze(0);
  } else {
    residuals_ = group_->allgather(sync_->errorFeedback());
  }
  residuals_step_ = done;
}

void RunCheckpoints::save(const CheckpointDecision& decision, int64_t done, double lr) {
  using Kind = CheckpointDecision::Kind;
  if (decision.kind == Kind::kWaitForPending) collectBackgroundSave();
  if (decision.kind == Kind::kSave) {
    const auto snapshot = [&](bool preempted) {
      Checkpoint checkpoint = capture_(done, lr, preempted);
      if (gathersRanks()) {
        if (residuals_step_ == done) {
          if (rank_state_) {
            addReplicaRows(checkpoint, residuals_);
          } else {
            addResiduals(checkpoint, residuals_);
          }
        } else {
          recorder_->warning("warning: the checkpoint of step " + std::to_string(done) +
                             " holds no error-feedback residuals (the ranks did not agree on "
                             "it); a resume from it starts them at zero");
        }
      }
      return checkpoint;
    };
    const auto pause = std::chrono::steady_clock::now();
    bool saved = false;
    std::optional<SaveResult> written;  // a foreground save's, reported once its stall is known
    if (decision.preempted) {
      // No try: a stop must not look checkpointed when it is not.
      collectBackgroundSave();
      store_->save(snapshot(true));
      saved = true;
    } else {
      // The previous background save's outcome first, so that its failure is reported as its own
      // and this step is still saved.
      collectBackgroundSave();
      try {
        Checkpoint snap = snapshot(false);
        if (decision.background) {
          store_->saveAsync(std::move(snap));
          pending_save_step_ = done;
        } else {
          written = store_->save(snap);
        }
        saved = true;
      } catch (const CheckpointError& e) {
        reportSaves();
        failed(done, e);  // the previous checkpoint stays the newest valid one
      }
    }
    stall_ms_[done] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - pause).count();
    policy_->saveAttempted(done, saved);
    if (written) reportSave(*written);  // as a background one is, through takeCompleted
  }
  reportSaves();
}

void RunCheckpoints::finish() {
  collectBackgroundSave();
  reportSaves();
}

void RunCheckpoints::collectBackgroundSave() {
  try {
    store_->waitForPending();
  } catch (const CheckpointError& e) {
    reportSaves();
    failed(pending_save_step_, e);
  }
}

void RunCheckpoints::reportSaves() {
  for (const SaveResult& r : store_->takeCompleted()) reportSave(r);
}

void RunCheckpoints::reportSave(const SaveResult& r) {
  failed_saves_ = 0;
  last_saved_step_ = std::max(last_saved_step_, static_cast<int64_t>(r.step));
  CheckpointSaved saved;
  saved.step = static_cast<int64_t>(r.step);
  saved.path = r.path;
  saved.stall_seconds = stall_ms_[saved.step] / 1000.0;
  saved.encode_seconds = r.encode_seconds;
  saved.write_seconds = r.write_seconds;
  saved.bytes = r.bytes;
  for (const CheckpointWarning& w : r.warnings) saved.warnings.push_back(w.str());
  recorder_->checkpointSaved(saved);
}

void RunCheckpoints::failed(int64_t done, const CheckpointError& error) {
  ++failed_saves_;
  const std::string newest_valid = last_saved_step_ >= 0 ? pathOf(last_saved_step_) : "";
  recorder_->checkpointFailed(done, error.what(), config_.checkpoint.max_failures, newest_valid);
  const bool final = done == total_steps_;
  if (!final && failed_saves_ < config_.checkpoint.max_failures) return;
  std::string text =
      final ? "the final checkpoint (step " + std::to_string(done) + ") failed: " + error.what()
            : std::to_string(failed_saves_) + " checkpoints in a row failed (checkpoint." +
                  "max_failures), the last at step " + std::to_string(done) + ": " + error.what() +
                  "; training stops so that no more work goes unsaved";
  text += newest_valid.empty() ? "; no checkpoint of this run was saved"
                               : "; the newest valid checkpoint is " + newest_valid +
                                     " (--resume auto continues from it)";
  if (final && final_weights_saved_) text += "; the trained weights were saved before it";
  if (isPermanentFileError(error.errorNumber())) {
    throw PermanentError(text + "; free space there or make it writable first");
  }
  throw std::runtime_error(text);
}

void RunCheckpoints::saveFinalWeights(models::Model& model) {
  if (!writer_ || final_weights_saved_) return;
  checkpoint::NamedTensors tensors = model.namedParameters();
  for (auto& buffer : model.namedBuffers()) tensors.push_back(std::move(buffer));
  const std::string path = config_.trainer.run_dir + "/model_state_dict.pt";
  try {
    saveStateDict(tensors, path);
  } catch (const std::exception& first) {
    // The run directory cannot take them: somewhere else, rather than lose the trained weights.
    const std::string fallback = (fs::temp_directory_path() / ("cumulus-model_state_dict-" +
                                                               std::to_string(::getpid()) + ".pt"))
                                     .string();
    try {
      saveStateDict(tensors, fallback);
    } catch (const std::exception& second) {
      throw PermanentError(std::string("the trained weights could not be saved: ") + first.what() +
                           "; and in " + fallback + ": " + second.what());
    }
    recorder_->warning(std::string("warning: ") + first.what() + "; the trained weights are in " +
                       fallback + " instead");
  }
  final_weights_saved_ = true;
}

}  // namespace cumulus::trainer
