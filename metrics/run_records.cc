#include "metrics/run_records.h"

#include <chrono>
#include <utility>

#include "metrics/store_publisher.h"
#include "metrics/tensorboard.h"

namespace cumulus::metrics {
namespace {

int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RunRecords::RunRecords(std::string tensorboard_dir, std::ostream* warnings)
    : tensorboard_dir_(std::move(tensorboard_dir)), warnings_(warnings) {}

RunRecords::~RunRecords() = default;

std::vector<std::shared_ptr<RecordSink>> RunRecords::sinks(bool writes, const base::RunEnv& env) {
  std::vector<std::shared_ptr<RecordSink>> sinks;
  if (writes && !tensorboard_dir_.empty()) {
    if (!tensorboard_) tensorboard_ = std::make_shared<TensorBoardRecords>(tensorboard_dir_);
    sinks.push_back(tensorboard_);
  }
  if (env.live_metrics && !env.store_host.empty() && env.store_port > 0) {
    if (!publisher_) {
      StorePublisherOptions live;
      live.rank = env.rank;
      live.warnings = warnings_;
      publisher_ = std::make_shared<StorePublisher>(
          env.store_host, static_cast<int>(env.store_port), env.job_token, live);
    }
    publisher_->setRank(env.rank);
    sinks.push_back(publisher_);
  }
  return sinks;
}

void RunRecords::note(const std::string& line) {
  if (begun_) {
    recorder_->note(line);
  } else {
    pending_.push_back(line);
  }
}

void RunRecords::warning(const std::string& line) {
  if (begun_) {
    recorder_->warning(line);
  } else {
    pending_.push_back(line.rfind("warning: ", 0) == 0 ? line : "warning: " + line);
  }
}

void RunRecords::begin(RunStart start, double exec_time, const GoodputHistory& history) {
  goodput_->start(exec_time, history);
  start.notes.insert(start.notes.end(), pending_.begin(), pending_.end());
  pending_.clear();
  recorder_->begin(start);
  begun_ = true;
}

void RunRecords::reformed(ReformRecord record) {
  record.detected_unix_ms = unixMillis() - static_cast<int64_t>(record.reform_ms);
  reform_ = std::move(record);
}

void RunRecords::afterStep() {
  if (!reform_) return;
  reform_->next_step_unix_ms = unixMillis();
  recorder_->reformed(*reform_);
  reform_.reset();
}

}  // namespace cumulus::metrics
