#include "tests/trainer/fault_parts.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "trainer/resume.h"

namespace cumulus::trainer {

LedgerBatchSource::LedgerBatchSource(std::shared_ptr<BatchSource> inner, const std::string& path,
                                     std::function<int64_t()> launch, std::function<int64_t()> rank)
    : ForwardingBatchSource(std::move(inner)),
      path_(path),
      out_(path, std::ios::app),
      launch_(std::move(launch)),
      rank_(std::move(rank)) {
  if (!out_) throw std::runtime_error(path + ": cannot open the sample ledger for appending");
}

StepBatch LedgerBatchSource::next(int64_t step, int64_t micro_batches) {
  StepBatch batch = inner_->next(step, micro_batches);
  out_ << ledgerLine(launch_(), batch.epoch, step, rank_(), batch.indices) << std::flush;
  if (!out_) throw std::runtime_error(path_ + ": cannot append to the sample ledger");
  return batch;
}

KillAtStep::KillAtStep(std::shared_ptr<BatchSource> inner, int64_t step, int64_t delay_ms,
                       bool stall)
    : ForwardingBatchSource(std::move(inner)), step_(step), delay_ms_(delay_ms), stall_(stall) {}

StepBatch KillAtStep::next(int64_t step, int64_t micro_batches) {
  StepBatch batch = inner_->next(step, micro_batches);
  if (step != step_) return batch;
  if (stall_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
  } else if (delay_ms_ <= 0) {
    ::raise(SIGKILL);
  } else {
    std::thread([ms = delay_ms_] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ::raise(SIGKILL);
    }).detach();
  }
  return batch;
}

SlowSamples::SlowSamples(std::shared_ptr<BatchSource> inner, int64_t us_per_sample)
    : ForwardingBatchSource(std::move(inner)), us_per_sample_(us_per_sample) {}

StepBatch SlowSamples::next(int64_t step, int64_t micro_batches) {
  StepBatch batch = inner_->next(step, micro_batches);
  std::this_thread::sleep_for(
      std::chrono::microseconds(us_per_sample_ * static_cast<int64_t>(batch.indices.size())));
  return batch;
}

HoldAtStep::HoldAtStep(std::shared_ptr<BatchSource> inner, int64_t step, std::function<void()> wait)
    : ForwardingBatchSource(std::move(inner)), step_(step), wait_(std::move(wait)) {}

StepBatch HoldAtStep::next(int64_t step, int64_t micro_batches) {
  if (step == step_) wait_();
  return inner_->next(step, micro_batches);
}

KillOnText::KillOnText(std::shared_ptr<metrics::MetricsRecorder> inner, std::string text)
    : ForwardingRecorder(std::move(inner)), text_(std::move(text)) {}

void KillOnText::note(const std::string& text) {
  if (text.find(text_) != std::string::npos) ::raise(SIGKILL);
  inner_->note(text);
}

void KillOnText::warning(const std::string& text) {
  if (text.find(text_) != std::string::npos) ::raise(SIGKILL);
  inner_->warning(text);
}

KillAtRecord::KillAtRecord(std::shared_ptr<metrics::MetricsRecorder> inner, int64_t step)
    : ForwardingRecorder(std::move(inner)), step_(step) {}

void KillAtRecord::step(const metrics::StepRecord& record) {
  if (record.step == step_) ::raise(SIGKILL);
  inner_->step(record);
}

SigtermAtStep::SigtermAtStep(std::shared_ptr<metrics::MetricsRecorder> inner, int64_t step)
    : ForwardingRecorder(std::move(inner)), step_(step) {}

void SigtermAtStep::step(const metrics::StepRecord& record) {
  inner_->step(record);
  if (record.step == step_) ::raise(SIGTERM);
}

FillDiskAfterCheckpoint::FillDiskAfterCheckpoint(std::shared_ptr<metrics::MetricsRecorder> inner,
                                                 int64_t step, std::string path)
    : ForwardingRecorder(std::move(inner)), step_(step), path_(std::move(path)) {}

void FillDiskAfterCheckpoint::checkpoint(const metrics::CheckpointRecord& record) {
  inner_->checkpoint(record);
  if (record.step != step_) return;
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path_ + ": open: " + std::strerror(errno));
  const std::vector<char> zeros(64 * 1024, 0);
  ssize_t written = 0;
  do {
    written = ::write(fd, zeros.data(), zeros.size());
  } while (written > 0);
  const int error = written < 0 ? errno : 0;
  ::close(fd);
  if (error != ENOSPC) {
    throw std::runtime_error(
        path_ + ": expected the disk to fill up, got " +
        (error == 0 ? std::string("a write of 0 bytes") : std::strerror(error)));
  }
}

}  // namespace cumulus::trainer
