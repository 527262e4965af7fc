#pragma once
// The ranks' shares of the global batch in the step loop (trainer.balance; the policy is
// balance.h): the shares in force, their agreement at step boundaries, and their reset after a
// change of membership. It owns the shares and this rank's rate meter, and hands every new set to
// the BatchSource. The shares change at a boundary before its checkpoint, so a checkpoint holds
// the shares of the step after it and a resume replays them. The rate meter starts again with
// every launch, so after a resume the next change may come at another step or differ from an
// uninterrupted run's. Training thread only.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "configs/experiment.h"
#include "distributed/balance.h"

namespace cumulus {
class ProcessGroup;
class Recorder;
}  // namespace cumulus

namespace cumulus::trainer {

class BatchSource;

class BatchShares {
 public:
  // `batches` takes each set of shares (BatchSource::setShares).
  BatchShares(const configs::TrainerConfig& config, std::shared_ptr<BatchSource> batches);

  // The shares a checkpoint holds (before start()).
  void restore(std::vector<int64_t> shares) { shares_ = std::move(shares); }
  // At start-up in a world of `world`: off: equal; fixed: the config's; auto: the checkpoint's,
  // if any. What it did with a checkpoint's shares goes to `notes`. std::invalid_argument for
  // fixed shares that do not fit the world or the batch.
  void start(int64_t world, std::vector<std::string>& notes);
  // One step's compute: `samples` in `seconds`.
  void measure(int64_t samples, double seconds) { rate_.add(samples, seconds); }
  // At boundary `done` with balance auto, every balance_every_steps steps: the ranks all-gather
  // their compute rates over `group` (null: alone, nothing to do) and take the shares
  // decideShares gives from the next step on; a change is recorded.
  void atBoundary(int64_t done, ProcessGroup* group, int64_t micro_batches, Recorder& recorder);
  // After a change of membership to `world` members: equal shares (fixed ones where they fit the
  // new world), and the rates measured again. Warnings go to `warnings` (the recorder may not
  // have begun).
  void reset(int64_t world, std::vector<std::string>& warnings);
  // A "balance" record of the shares in force from the next step on, in a world of `world`
  // (nothing with balance off).
  void record(const char* reason, int64_t world, Recorder& recorder) const;
  // In force for the next step; empty: equal.
  const std::vector<int64_t>& current() const { return shares_; }

 private:
  const configs::TrainerConfig& config_;
  std::shared_ptr<BatchSource> batches_;
  std::vector<int64_t> shares_;
  distributed::RateMeter rate_;  // this rank's samples per second of compute (balance auto)
};

}  // namespace cumulus::trainer
