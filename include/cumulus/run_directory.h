#pragma once
// <cumulus/run_directory.h>: one job at a time in a run directory, and no experiment's checkpoints
// overwritten by another's. cumulus-train holds both guards; a program with its own loop takes
// the same ones (no LibTorch here).
//
//   cumulus::RunDirectoryLockOptions options;
//   options.run_id = env.run_id;
//   cumulus::RunDirectoryLock lock(run_dir, options);  // the writer (rank 0), before it writes
//   cumulus::checkSameExperiment(run_dir + "/checkpoints", my_config_digest,  // a fresh start
//                                "resume it, or give this run another directory");
//
// The lock is an advisory flock(2) on <dir>/cumulus.lock, which records the holder's host, pid,
// start time and run id for the message a second job gets. The kernel drops the lock when its
// holder dies, however it dies (SIGKILL, a lost host's NFS lease), so a lock left by a dead
// process is never stale: the next job takes it over, and note() says whose it was.

#include <chrono>
#include <optional>
#include <string>

#include "cumulus/checkpoint_state.h"
#include "cumulus/errors.h"

namespace cumulus {

// Another live process holds the run directory. exit 2.
class RunDirectoryBusy : public UserError {
 public:
  using UserError::UserError;
};

// The checkpoints in a directory were written by another experiment. exit 2.
class ExperimentMismatch : public UserError {
 public:
  using UserError::UserError;
};

struct RunDirectoryLockOptions {
  // This job's id (CUMULUS_RUN_ID); empty: none. A holder with the same non-empty id is this job's
  // own earlier process (a writer that is still exiting while a survivor takes over in place, or
  // a restarted one): it is waited for, up to `same_run_wait`, instead of refused at once.
  std::string run_id;
  std::chrono::milliseconds same_run_wait{std::chrono::seconds(60)};
  // Who holds it, for the message another job gets ("cumulus-train", "my_trainer").
  std::string program = "cumulus";
};

// Holds a run directory for this process while it lives. Not copyable; movable.
class RunDirectoryLock {
 public:
  // Creates `dir` (with parents) and takes the lock. Throws RunDirectoryBusy naming the holder
  // ("<dir> is in use by cumulus-train, pid 4242 on host node-1 since 2026-11-26T09:30:01Z (run
  // id 3f2a): wait for that job to end, stop it, or give this run another directory"), and
  // UserError when `dir` cannot be created or the lock file cannot be written (the text names the
  // path and errno). Blocks only while it waits for the same run (see above).
  explicit RunDirectoryLock(const std::string& dir, RunDirectoryLockOptions options = {});
  // Releases the lock and clears the holder's record.
  ~RunDirectoryLock();
  RunDirectoryLock(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock& operator=(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

  const std::string& path() const { return path_; }  // <dir>/cumulus.lock
  // Empty, or what was taken over: "took over <dir> from cumulus-train, pid 4242 on host node-1
  // (started 2026-11-26T09:30:01Z), which ended without releasing it".
  const std::string& note() const { return note_; }

 private:
  void release();
  std::string path_;
  std::string note_;
  int fd_ = -1;
};

// The newest checkpoint directory of `checkpoint_dir` (step-N, by N) and the state.pb it holds
// (not verified against its MANIFEST: this says whose it is, not whether it can be resumed). None
// when there is no such directory, or its state.pb is missing or does not decode.
struct CheckpointOrigin {
  std::string path;
  CheckpointState state;  // state.config_digest: the experiment that wrote it
};
std::optional<CheckpointOrigin> newestCheckpointOrigin(const std::string& checkpoint_dir);

// For a run that starts from step 0 and will save into `checkpoint_dir`: throws
// ExperimentMismatch when the newest checkpoint there records a config digest other than
// `digest` (both non-empty). The text names the directory, the checkpoint, both digests and then
// `choices` (what the caller's user can do instead, e.g. "resume it with --resume auto, ...").
void checkSameExperiment(const std::string& checkpoint_dir, const std::string& digest,
                         const std::string& choices);

}  // namespace cumulus
