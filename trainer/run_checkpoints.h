#pragma once
// The run's checkpoints and what keeps a user's work safe around the step loop (docs/spot.md):
// one job per run directory (the writer holds its lock while it runs), no experiment's
// checkpoints overwritten by another's, room for the checkpoints at their peak (checkpoint.keep
// and the one being written) checked before training, a save
// whenever the CheckpointPolicy says (in the background when it asks), every failed save reported
// and counted (the run stops at checkpoint.max_failures in a row), the final weights written
// before the last checkpoint, and with comm.compression bf16 every rank's error-feedback residuals
// gathered into the checkpoints. Rank 0 writes; every rank may read. Training thread only.

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "configs/experiment.h"
#include "cumulus/checkpoint.h"
#include "cumulus/preemption.h"
#include "cumulus/run_directory.h"
#include "trainer/checkpoint_policy.h"
#include "trainer/trainer.h"

namespace cumulus {
class DataParallel;
class ProcessGroup;
class Recorder;
}  // namespace cumulus

namespace cumulus::models {
class Model;
}

namespace cumulus::trainer {

class RunCheckpoints {
 public:
  // `capture(done, lr, preempted)`: the training state after step `done` (without residuals).
  // `recorder` is read at each use (the trainer makes it when its loop starts, and saves come
  // after that); the trainer outlives this object.
  // `writer`: this rank writes (until setMembership says otherwise).
  RunCheckpoints(const configs::Experiment& config, const TrainerOptions& options, bool writer,
                 const std::unique_ptr<Recorder>& recorder,
                 std::function<Checkpoint(int64_t done, double lr, bool preempted)> capture);
  ~RunCheckpoints();

  // checkpoint.dir, by default <trainer.run_dir>/checkpoints.
  const std::string& dir() const { return dir_; }
  std::string pathOf(int64_t step) const;
  Checkpoints& store() { return *store_; }

  // The membership: whether this rank writes, its rank and world, the group and the sync the
  // residuals are gathered over (null alone). The policy is built at the first call and again
  // when this rank stops or starts writing (so that its every_seconds clock does not start
  // again at each re-forming). SetupError when TrainerOptions::checkpoint_policy gives none.
  void setMembership(bool writer, int64_t rank, int64_t world, ProcessGroup* group,
                     DataParallel* sync);
  void setTotalSteps(int64_t steps) { total_steps_ = steps; }
  // trainer.sync diloco: every rank's own state (its replica, trainer/diloco_state.h), gathered
  // where any rank may save, like the residuals, and kept as diloco_replicas.pt.
  void setRankState(std::function<torch::Tensor()> mine);

  // The guards, before training. claimRunDir: the writer's lock on trainer.run_dir (and
  // checkpoint.dir when it lies outside); a second job stops here, naming the first.
  void claimRunDir(const std::string& run_id, std::vector<std::string>& notes);
  // When run() ends: a background save finished (its failure only told), then the locks dropped.
  void releaseRunDir() noexcept;
  // True when --overwrite removed another experiment's checkpoints (start from step 0); throws
  // ExperimentMismatch when a start from step 0 would overwrite them.
  bool guardOtherExperiment(bool resuming, std::vector<std::string>& notes);
  // The writer's check that checkpoints can be written and fit at their peak: checkpoint.keep of
  // them and the one being written, the ones already there counted as room (SetupError).
  void checkRoom(models::Model& model, int64_t world);

  // A resume from the checkpoint of `step`, with the residuals it holds (undefined: none).
  void resumed(int64_t step, torch::Tensor residuals);
  // After the sync is attached: this rank's residual from the resume (residualForRank); notes
  // for the recorder go to `notes`.
  void restoreResiduals(std::vector<std::string>& notes);

  // At the end of step `done` (before the agreement) and after the agreed `action`: the policy's
  // decision, with the residuals gathered first where any rank may save.
  CheckpointDecision dueAtStepEnd(int64_t done, bool last);
  CheckpointDecision dueAfterAgreement(int64_t done, StepAction action);
  // Carries out a decision for the state after step `done`, then reports the saves that have
  // committed. A failed save is reported and counted; the run stops (std::runtime_error, or
  // PermanentError for a full or read-only disk) at checkpoint.max_failures in a row or for the
  // final one. A stop's save is not tried twice: its CheckpointError propagates.
  void save(const CheckpointDecision& decision, int64_t done, double lr);
  // The final weights as model_state_dict.pt in the run directory (elsewhere, told, when it
  // cannot take them); writer only, once.
  void saveFinalWeights(models::Model& model);
  // The background save in flight finished, and every committed save reported.
  void finish();

 private:
  bool compressing() const;
  bool gathersRanks() const;  // compressing(), or a rank state to gather
  void gatherResiduals(int64_t done);
  void collectBackgroundSave();
  void reportSaves();
  void reportSave(const SaveResult& result);  // recorded; the failures in a row start again
  void failed(int64_t done, const CheckpointError& error);

  const configs::Experiment& config_;
  const TrainerOptions& options_;
  const std::unique_ptr<Recorder>& recorder_;
  std::function<Checkpoint(int64_t, double, bool)> capture_;
  std::string dir_;
  std::unique_ptr<Checkpoints> store_;
  std::shared_ptr<CheckpointPolicy> policy_;
  bool writer_;  // when policy_ was built
  int64_t rank_ = 0;
  int64_t world_ = 1;
  ProcessGroup* group_ = nullptr;  // more than one rank; null alone
  DataParallel* sync_ = nullptr;
  int64_t total_steps_ = 0;
  std::optional<RunDirectoryLock> run_dir_lock_;
  std::optional<RunDirectoryLock> checkpoint_dir_lock_;  // when checkpoint.dir is elsewhere
  int64_t failed_saves_ = 0;                             // in a row
  int64_t last_saved_step_ = -1;                         // the newest committed checkpoint
  int64_t pending_save_step_ = -1;                       // of the last saveAsync
  bool final_weights_saved_ = false;
  std::map<int64_t, double> stall_ms_;  // step -> the training thread's pause for its checkpoint
  torch::Tensor residuals_;             // [world, n]: gathered at the boundary of residuals_step_
  int64_t residuals_step_ = -1;
  torch::Tensor resumed_residuals_;  // [saved world, n] from the checkpoint, until restored
  std::function<torch::Tensor()> rank_state_;  // setRankState's
};

}  // namespace cumulus::trainer
