#pragma once
// Parts the in-process Elastic tests share: options without signal watchers or a deadline thread,
// and a stop agreement that asks for a checkpoint after one step.

#include <cstdint>
#include <memory>
#include <utility>

#include "cumulus/elastic.h"

namespace cumulus::testing {

inline ElasticOptions quietOptions() {
  ElasticOptions options;
  options.preemption.grace_seconds = 0;  // no deadline thread in the test process
  options.preemption.watch_sigterm = false;
  options.preemption.watch_sigusr1 = false;
  return options;
}

// Answers kCheckpoint after step `at` and the standard one's answer otherwise; counts its calls.
class CheckpointAt final : public StopAgreement {
 public:
  CheckpointAt(std::shared_ptr<StopAgreement> standard, int64_t at)
      : standard_(std::move(standard)), at_(at) {}
  StepAction decide(int64_t steps_done) override {
    ++calls;
    const StepAction agreed = standard_->decide(steps_done);
    return steps_done == at_ ? StepAction::kCheckpoint : agreed;
  }
  void waitForAll() override { standard_->waitForAll(); }
  int calls = 0;

 private:
  std::shared_ptr<StopAgreement> standard_;
  int64_t at_;
};

}  // namespace cumulus::testing
