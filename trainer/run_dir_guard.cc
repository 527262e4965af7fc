// What keeps a user's work safe around the step loop: one job per run directory, no experiment's
// checkpoints overwritten by another's, room for checkpoints checked before training, failed
// saves reported and counted, and the final weights written before the last checkpoint.
#include <unistd.h>

#include <filesystem>

#include "cumulus/errors.h"
#include "configs/digest.h"
#include "cumulus/run_directory.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/resume.h"
#include "trainer/state_dict.h"
#include "trainer/trainer_impl.h"

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
    if (!checkpointDirStep(name) && !temporary) continue;
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

uint64_t bytesOf(const NamedTensors& tensors) {
  uint64_t bytes = 0;
  for (const auto& [name, t] : tensors) {
    bytes += static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(t.element_size());
  }
  return bytes;
}

}  // namespace

void Trainer::Impl::claimRunDir() {
  // An empty run_dir (the library's, not a config's: the schema refuses it) writes nothing here.
  if (run_dir_lock_ || config_.trainer.run_dir.empty()) return;
  RunDirectoryLockOptions options;
  options.run_id = env_.run_id;
  options.program = "cumulus-train";
  run_dir_lock_.emplace(config_.trainer.run_dir, options);
  if (!run_dir_lock_->note().empty()) resume_notes_.push_back("note: " + run_dir_lock_->note());
  if (!within(checkpointDir(), config_.trainer.run_dir)) {
    checkpoint_dir_lock_.emplace(checkpointDir(), options);
    if (!checkpoint_dir_lock_->note().empty()) {
      resume_notes_.push_back("note: " + checkpoint_dir_lock_->note());
    }
  }
}

void Trainer::Impl::releaseRunDir() noexcept {
  try {
    checkpoints_->waitForPending();
  } catch (const std::exception& e) {
    // run() already failed, or is ending with the error it collected: this one is only told.
    try {
      recorder_->warning(std::string("warning: checkpoint failed: ") + e.what());
    } catch (...) {
    }
  }
  checkpoint_dir_lock_.reset();
  run_dir_lock_.reset();
}

bool Trainer::Impl::guardOtherExperiment(bool resuming) {
  const std::optional<CheckpointOrigin> origin = newestCheckpointOrigin(checkpointDir());
  if (!origin) return false;
  const std::vector<std::string> changes = otherExperimentChanges(config_, origin->state);
  if (changes.empty()) return false;
  const std::string whose = checkpointDir() + " holds checkpoints of another experiment (newest " +
                            origin->path + ", config digest " + origin->state.config_digest +
                            "; this experiment's is " + configs::configDigest(config_) + ")";
  if (options_.overwrite) {
    const int removed = writes() ? removeCheckpointDirs(checkpointDir()) : 0;
    resume_notes_.push_back("--overwrite: " + whose + "; removed " + std::to_string(removed) +
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

void Trainer::Impl::checkCheckpointRoom() {
  if (config_.trainer.run_dir.empty() && config_.checkpoint.dir.empty()) return;  // see claimRunDir
  // model.pt holds the parameters and buffers; optim.pt one tensor per parameter and slot (SGD's
  // momentum buffer, AdamW's two moments). 64 KiB covers state.pb, the MANIFEST and pickling.
  NamedTensors tensors = model_->namedParameters();
  const uint64_t parameters = bytesOf(tensors);
  const uint64_t buffers = bytesOf(model_->namedBuffers());
  const auto& o = config_.optimizer;
  const uint64_t slots = o.name == configs::OptimizerName::kAdamw ? 2 : (o.momentum > 0 ? 1 : 0);
  uint64_t each = parameters * (1 + slots) + buffers + 64 * 1024;
  // comm.compression bf16 adds comm_residual.pt: every rank's float32 residuals, [world, n].
  if (config_.comm.compression == Compression::kBf16 && env_.world_size > 1) {
    each += static_cast<uint64_t>(env_.world_size) *
            static_cast<uint64_t>(model_->parameterCount()) * sizeof(float);
  }
  try {
    checkpoints_->checkRoom(each, 2);
  } catch (const UserError& e) {
    throw SetupError(std::string(e.what()) +
                     " (checkpoint.dir; by default <trainer.run_dir>/checkpoints)");
  }
}

void Trainer::Impl::checkpointFailed(int64_t done, const CheckpointError& error) {
  ++failed_saves_;
  CheckpointFailureRecord record;
  record.step = done;
  record.error = error.what();
  record.in_a_row = failed_saves_;
  record.max_failures = config_.checkpoint.max_failures;
  if (last_saved_step_ >= 0) {
    record.newest_valid =
        checkpointDir() + "/" + checkpointDirName(static_cast<uint64_t>(last_saved_step_));
  }
  recorder_->checkpointFailed(record);
  const bool final = done == total_steps_;
  if (!final && failed_saves_ < config_.checkpoint.max_failures) return;
  std::string text =
      final ? "the final checkpoint (step " + std::to_string(done) + ") failed: " + record.error
            : std::to_string(failed_saves_) + " checkpoints in a row failed (checkpoint." +
                  "max_failures), the last at step " + std::to_string(done) + ": " + record.error +
                  "; training stops so that no more work goes unsaved";
  text += record.newest_valid.empty() ? "; no checkpoint of this run was saved"
                                      : "; the newest valid checkpoint is " + record.newest_valid +
                                            " (--resume auto continues from it)";
  if (final && final_weights_saved_) text += "; the trained weights were saved before it";
  if (isPermanentFileError(error.errorNumber())) {
    throw PermanentError(text + "; free space there or make it writable first");
  }
  throw std::runtime_error(text);
}

void Trainer::Impl::saveFinalWeights() {
  if (!writes() || final_weights_saved_) return;
  NamedTensors tensors = model_->namedParameters();
  for (auto& buffer : model_->namedBuffers()) tensors.push_back(std::move(buffer));
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
