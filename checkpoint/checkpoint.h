#pragma once
// Crash-consistent checkpoints in a directory (docs/design.md "Checkpoints and the run directory").
//
//   <dir>/step-00001200/{model.pt, optim.pt, state.pb, MANIFEST}
//
// Commit protocol of a save: write every file into step-00001200.tmp/ (each fsynced), MANIFEST
// last (fsynced), fsync the .tmp directory, rename it to step-00001200 (an existing directory of
// that step is swapped out atomically with renameat2 where the file system can), fsync <dir>.
// A crash at any point leaves either the complete new checkpoint or none; a directory counts as
// a checkpoint only if its MANIFEST verifies (every listed file present with its size and
// SHA-256). There is no "latest" pointer file: the newest valid directory is found by scanning.
//
// Retention after each successful save: the K newest valid checkpoints are kept; directories whose
// step is below the oldest kept one are removed; nothing at or above it is removed (an invalid
// directory newer than a valid one is left for a human to look at and reported). Stale .tmp
// directories (from a crash) are removed when the next save starts and by removeStaleTemporaries.
//
// One writer per directory: two managers (or processes) saving into the same <dir> is a misuse.
// Thread-safety: a CheckpointManager is used from one thread (the training thread); it runs at
// most one background save of its own. latestValid and load may run while that save is in
// flight; a directory that its retention removes meanwhile is then reported as a warning.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/annotated_mutex.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_snapshot.h"
#include "checkpoint/file_system.h"
#include "cumulus/checkpoint.h"

namespace cumulus::checkpoint {

// The value types are public API (<cumulus/checkpoint.h>, where they are documented).

// The most bytes a checkpoint directory holds at once while saves of about `each` bytes go on
// with `keep` kept, starting from the checkpoints already there (`existing`: their sizes, newest
// first, all taken as valid and older than what the run saves). A save writes its .tmp beside
// every checkpoint there and only then removes what falls out of the newest `keep` (the commit
// protocol above), so the peak is the largest set present before a save, plus that save: at the
// first save every existing one, after m saves the m new ones and the keep - m newest existing
// ones. keep x each when the directory starts empty, plus the one being written. Saturates at
// UINT64_MAX rather than overflow.
uint64_t peakCheckpointBytes(uint64_t each, uint64_t keep, const std::vector<uint64_t>& existing);

class CheckpointManager {
 public:
  // `dir` is created (with parents) on the first save. keep >= 1 (asserted). `fs` must outlive the
  // manager.
  CheckpointManager(std::string dir, size_t keep, FileSystem& fs);
  // Waits for a pending background save. A background error that no call surfaced is written to
  // stderr (a destructor cannot throw): call waitForPending() before destruction to handle it.
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // "step-00001200" (at least 8 digits).
  static std::string dirName(uint64_t step);
  const std::string& dir() const { return dir_; }

  // Writes and commits `snapshot` as step snapshot.state.step, then applies retention. Blocks
  // until the checkpoint is durable. First waits (up to kDefaultCheckpointWait) for a pending
  // background save and rethrows its error if it failed. Throws CheckpointError if the save does
  // not commit; its .tmp directory is removed and older checkpoints are untouched.
  SaveResult save(const CheckpointSnapshot& snapshot);

  // Takes `snapshot` and saves it on a background thread; returns as soon as the thread started.
  // The snapshot must own its tensors (cloneTensors, Optimizer::exportState) so that training
  // may change the model meanwhile. At most one save is in flight: this call first waits up to
  // `wait` for the previous one and throws CheckpointError if it is still running then, or
  // rethrows the previous save's error. When it throws, `snapshot` has not been moved from: the
  // caller may retry with it (or save() it) after handling the error. The caller's stall is a
  // thread start (~0.1 ms); pickling, hashing, writing and retention run in the background.
  void saveAsync(CheckpointSnapshot&& snapshot,
                 std::chrono::milliseconds wait = kDefaultCheckpointWait);

  // Blocks until no background save is in flight or `timeout` passes; returns false on timeout.
  // Rethrows (once) the error of a background save that failed.
  bool waitForPending(std::chrono::milliseconds timeout = kDefaultCheckpointWait);
  // True while a background save runs. Never blocks.
  bool pending() const;
  // Results of background saves that committed since the last call, oldest first.
  std::vector<SaveResult> takeCompleted();

  // The newest directory step-N whose MANIFEST verifies, or none. Verification reads and hashes
  // every file (no deserialization). Each newer directory that fails verification is reported in
  // `warnings` with its path and reason; so is a valid one with unlisted files. Throws
  // FileSystemError only if `dir` exists but cannot be listed; a missing `dir` means none.
  std::optional<CheckpointInfo> latestValid(std::vector<CheckpointWarning>& warnings);
  // What a resume calls: the newest valid checkpoint, loaded, with each file read and hashed once.
  // A directory that verifies but does not decode (a writer bug) is reported in `warnings` and
  // the next older one is tried. None if there is no usable checkpoint.
  std::optional<std::pair<CheckpointInfo, CheckpointSnapshot>> loadLatestValid(
      std::vector<CheckpointWarning>& warnings);
  // All directories step-N (valid or not, no verification), newest first.
  std::vector<CheckpointInfo> list();

  // Verifies the MANIFEST of `path` first, then deserializes the verified bytes. Throws
  // CheckpointError naming `path` and the reason for an invalid checkpoint, or an undecodable
  // file, or a state.pb whose step differs from the directory name.
  CheckpointSnapshot load(const std::string& path);

  // Removes <dir>/step-*.tmp left by an interrupted save (not the one a background save is
  // writing). Returns the removed paths.
  std::vector<std::string> removeStaleTemporaries();

  // A writer's start-up check (<cumulus/checkpoint.h> Checkpoints::checkRoom): creates `dir`,
  // writes, fsyncs and removes a small probe file in it, and requires room for the most its
  // checkpoints will take at once (peakCheckpointBytes) when each new one takes about
  // `bytes_each`. The checkpoints already there count as room, since the saves replace them in
  // turn. Throws UserError naming the directory and the failed operation, or the bytes needed
  // and free and what to do; `keep_name` is how the message names the number kept.
  void checkRoom(uint64_t bytes_each, const std::string& keep_name = "keep");

 private:
  SaveResult write(const CheckpointSnapshot& snapshot);
  std::optional<CheckpointInfo> scanNewestFirst(
      std::vector<CheckpointWarning>& warnings,
      const std::function<void(const CheckpointInfo&, const VerifiedCheckpoint&)>& accept);
  std::string commit(const std::string& tmp, const std::string& final_path);
  std::vector<CheckpointWarning> applyRetention(const std::string& just_saved);
  void ensureDir();
  // Waits for the background thread under `lock`; returns false on timeout.
  bool waitLocked(base::MutexLock& lock, std::chrono::milliseconds timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void rethrowPendingError(base::MutexLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string dir_;
  const size_t keep_;
  FileSystem& fs_;

  mutable base::Mutex mutex_;
  base::CondVar done_cv_;
  std::thread worker_;  // joined before reuse; only the owner thread touches it
  bool in_flight_ ABSL_GUARDED_BY(mutex_) = false;
  std::string in_flight_name_ ABSL_GUARDED_BY(mutex_);  // "step-00001200"
  std::exception_ptr error_ ABSL_GUARDED_BY(mutex_);
  std::vector<SaveResult> completed_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace cumulus::checkpoint
