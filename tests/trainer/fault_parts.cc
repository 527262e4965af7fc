#include "tests/trainer/fault_parts.h"

#include <signal.h>

#include <stdexcept>
#include <utility>

#include "trainer/resume.h"

namespace cumulus::trainer {

LedgerBatchSource::LedgerBatchSource(std::shared_ptr<BatchSource> inner, const std::string& path,
                                     int64_t launch, int64_t rank)
    : inner_(std::move(inner)),
      path_(path),
      out_(path, std::ios::app),
      launch_(launch),
      rank_(rank) {
  if (!out_) throw std::runtime_error(path + ": cannot open the sample ledger for appending");
}

StepBatch LedgerBatchSource::next(int64_t step, int64_t micro_batches) {
  StepBatch batch = inner_->next(step, micro_batches);
  out_ << ledgerLine(launch_, batch.epoch, step, rank_, batch.indices) << std::flush;
  if (!out_) throw std::runtime_error(path_ + ": cannot append to the sample ledger");
  return batch;
}

SigtermAfterStep::SigtermAfterStep(std::shared_ptr<StopAgreement> inner, int64_t step)
    : inner_(std::move(inner)), step_(step) {}

StepAction SigtermAfterStep::decide(int64_t steps_done) {
  if (steps_done == step_) ::raise(SIGTERM);
  return inner_->decide(steps_done);
}

}  // namespace cumulus::trainer
