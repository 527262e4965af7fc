#include "metrics/recorder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include <chrono>

#include "metrics/goodput.h"
#include "metrics/metrics_log.h"
#include "metrics/progress.h"
#include "metrics/startup_profile.h"

namespace cumulus::metrics {
namespace {

std::string formatEpochs(double epochs) {
  char text[32];
  if (std::fabs(epochs - std::round(epochs)) < 1e-9) {
    std::snprintf(text, sizeof(text), "%.0f", epochs);
  } else {
    std::snprintf(text, sizeof(text), "%.2f", epochs);
  }
  return text;
}

double perStepMs(double seconds, int64_t steps) {
  return steps > 0 ? 1000.0 * seconds / static_cast<double>(steps) : 0;
}

// The counters of a train or summary record that not every run has: the bytes sent, and the
// outer rounds of low-communication training only when it runs them.
void addCommCounters(nlohmann::ordered_json& record, uint64_t bytes_sent, int64_t outer_rounds,
                     double outer_wait_seconds) {
  record["comm_bytes_sent"] = bytes_sent;
  if (outer_rounds < 0) return;
  record["outer_rounds"] = outer_rounds;
  record["outer_wait_s"] = outer_wait_seconds;
}

double wallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void addCollectives(nlohmann::ordered_json& status, const std::vector<CollectiveStats>& ops,
                    uint64_t bytes_sent) {
  nlohmann::ordered_json by_kind = nlohmann::ordered_json::object();
  for (const CollectiveStats& s : ops) {
    by_kind[s.op] = {{"count", s.count}, {"seconds", s.seconds}, {"bytes_sent", s.bytes_sent}};
  }
  status["collectives"] = std::move(by_kind);
  status["comm_bytes_sent"] = bytes_sent;
}

double launchExecTime() { return wallNow() - secondsSinceProcessStart(); }

ProgressMetricsRecorder::ProgressMetricsRecorder(ProgressRecorderOptions options)
    : options_(std::move(options)) {}

ProgressMetricsRecorder::~ProgressMetricsRecorder() = default;

void ProgressMetricsRecorder::begin(const RunStart& start) {
  std::ostream& console = options_.console != nullptr ? *options_.console : discard_;
  total_steps_ = start.total_steps;
  const int64_t epochs = (start.total_steps + start.steps_per_epoch - 1) / start.steps_per_epoch;
  progress_ = std::make_unique<Progress>(console, options_.live, start.total_steps, epochs,
                                         options_.log_every_steps, options_.quiet);
  // The account spans the launch: a re-formed group's begin() keeps it. A resumed launch takes
  // over the account of the launches before it, read before the file is cut back.
  if (!goodput_) {
    goodput_ = options_.goodput ? options_.goodput : std::make_shared<GoodputAccount>();
  }
  if (!goodput_->started()) {
    GoodputHistory history;
    if (!options_.metrics_path.empty() && start.start_step > 0) {
      history = readGoodputHistory(options_.metrics_path, start.start_step);
    }
    goodput_->start(launchExecTime(), history);
  }
  if (!options_.metrics_path.empty()) {
    // One metrics.jsonl for the whole run: a resumed launch continues the file, dropping the
    // records of the steps it runs again.
    if (start.start_step == 0) {
      metrics_ = std::make_unique<MetricsLog>(options_.metrics_path);
    } else {
      metrics_ = std::make_unique<MetricsLog>(
          MetricsLog::continueAfter(options_.metrics_path, start.start_step));
      nlohmann::ordered_json record{
          {"type", "resume"}, {"step", start.start_step}, {"world_size", options_.world_size}};
      if (!options_.compression.empty()) record["compression"] = options_.compression;
      emit(record);
    }
  }
  // A re-formed group begins its records again without the model line.
  if (!start.model_summary.empty()) progress_->info("model: " + start.model_summary);
  if (!start.precision.empty()) {
    progress_->info("precision: " + start.precision + " (" + start.precision_reason + ")");
    if (!start.precision_warning.empty()) progress_->line("warning: " + start.precision_warning);
    if (metrics_) {
      nlohmann::ordered_json record{{"type", "precision"},
                                    {"precision", start.precision},
                                    {"requested", start.precision_requested},
                                    {"reason", start.precision_reason}};
      if (!start.precision_warning.empty()) record["warning"] = start.precision_warning;
      emit(record);
    }
  }
  for (const std::string& line : start.notes) progress_->info(line);
}

void ProgressMetricsRecorder::firstStep(int64_t step, const StartupProfile* startup) {
  std::string text = "first step " + std::to_string(step) + " completed";
  nlohmann::ordered_json record{{"type", "first_step"}, {"step", step}};
  if (startup != nullptr) {
    text += ", " + startup->summary();
    record["seconds_since_exec"] = startup->totalSeconds();
  }
  progress_->info(text);
  emit(record);
  first_step_pending_ = true;
}

void ProgressMetricsRecorder::step(const StepRecord& r) {
  const double now = wallNow();
  if (first_step_pending_) {
    goodput_->firstStep(now - r.seconds);
    first_step_pending_ = false;
  }
  goodput_->step(r.seconds, r.comm_wait_seconds);
  window_.local_samples += r.local_samples;
  window_.loss += r.loss;
  window_.seconds += r.seconds;
  window_.comm_wait += r.comm_wait_seconds;
  window_.samples += r.samples;
  ++window_.steps;
  const bool record = r.step == 1 || r.step == total_steps_ ||
                      (options_.log_every_steps > 0 && r.step % options_.log_every_steps == 0);
  // Each rank's loss is its share of the global mean: records show the sum over ranks (one small
  // all-reduce per record, not per step); a live line in between scales the local share.
  const bool alone = !options_.sum_over_ranks;
  if (record && !alone) window_.loss = options_.sum_over_ranks(window_.loss);
  const double mean_loss = window_.loss / static_cast<double>(window_.steps);
  const double shown_loss =
      mean_loss * (record || alone ? 1.0 : static_cast<double>(options_.world_size));
  // Throughput of training time only, evaluations excluded.
  const double samples_per_sec =
      window_.seconds > 0 ? static_cast<double>(window_.samples) / window_.seconds : 0;
  progress_->update({r.step, r.epoch, shown_loss, samples_per_sec, r.elapsed_seconds});
  if (!record) return;
  publishRankStatus(r, shown_loss, samples_per_sec);
  if (metrics_) {
    const double step_ms = perStepMs(window_.seconds, window_.steps);
    const double wait_ms = perStepMs(window_.comm_wait, window_.steps);
    nlohmann::ordered_json train{{"type", "train"},
                                 {"step", r.step},
                                 {"epoch", r.epoch},
                                 {"loss", shown_loss},
                                 {"lr", r.lr},
                                 {"samples_per_sec", samples_per_sec},
                                 {"step_time_ms", step_ms},
                                 {"compute_ms", step_ms - wait_ms},
                                 {"comm_wait_ms", wait_ms}};
    addCommCounters(train, r.comm_bytes_sent, r.outer_rounds, r.outer_wait_seconds);
    emit(train);
  }
  window_ = Window();
}

void ProgressMetricsRecorder::evaluation(int64_t step, int64_t epoch, const Evaluation& result) {
  char text[160];
  std::snprintf(text, sizeof(text), "eval  epoch %lld  step %lld  test_loss %.4f",
                static_cast<long long>(epoch), static_cast<long long>(step), result.loss);
  std::string line = text;
  // Accuracy only where it means something (class ids, tokens): no "accuracy 0" for mse.
  if (result.accuracy) {
    std::snprintf(text, sizeof(text), "  test_accuracy %.4f", *result.accuracy);
    line += text;
  }
  progress_->info(line);
  if (metrics_) {
    nlohmann::ordered_json record{
        {"type", "eval"}, {"step", step}, {"epoch", epoch}, {"test_loss", result.loss}};
    if (result.accuracy) record["test_accuracy"] = *result.accuracy;
    emit(record);
  }
  goodput_->evaluation(result.seconds);
}

void ProgressMetricsRecorder::scalar(int64_t step, const std::string& name, double value) {
  emit(
      nlohmann::ordered_json{{"type", "scalar"}, {"step", step}, {"name", name}, {"value", value}});
}

void ProgressMetricsRecorder::checkpoint(const CheckpointRecord& r) {
  char text[320];
  if (r.encode_seconds > 0 || r.write_seconds > 0) {
    std::snprintf(text, sizeof(text),
                  "checkpoint step %lld: %s (stall %.2f ms, encode %.3f s, write %.3f s, %.1f MB)",
                  static_cast<long long>(r.step), r.path.c_str(), r.stall_ms, r.encode_seconds,
                  r.write_seconds, static_cast<double>(r.bytes) / 1e6);
  } else {  // a save timed whole (<cumulus/recorder.h>)
    std::snprintf(text, sizeof(text), "checkpoint step %lld: %s (stall %.2f ms, %.1f MB)",
                  static_cast<long long>(r.step), r.path.c_str(), r.stall_ms,
                  static_cast<double>(r.bytes) / 1e6);
  }
  progress_->info(text);
  goodput_->checkpointStall(r.stall_ms / 1000.0);
  if (metrics_) {
    emit(nlohmann::ordered_json{
        {"type", "checkpoint"}, {"step", r.step}, {"stall_ms", r.stall_ms}, {"path", r.path}});
    // The split as of this checkpoint: where a launch that resumes from it starts its account.
    emitGoodput(r.step);
  }
  for (const std::string& w : r.warnings) progress_->line("warning: " + w);
}

static std::string describeFailure(const CheckpointFailureRecord& r) {
  const std::string stops =
      r.max_failures > 0 ? "; the run stops at " + std::to_string(r.max_failures) : "";
  return "warning: checkpoint step " + std::to_string(r.step) + " failed (" +
         std::to_string(r.in_a_row) + " in a row" + stops + "): " + r.error +
         "; the newest valid checkpoint is " +
         (r.newest_valid.empty() ? std::string("none yet") : r.newest_valid);
}

void MetricsRecorder::checkpointFailed(const CheckpointFailureRecord& record) {
  warning(describeFailure(record));
}

void ProgressMetricsRecorder::checkpointFailed(const CheckpointFailureRecord& r) {
  progress_->line(describeFailure(r));
  if (metrics_) {
    emit(nlohmann::ordered_json{{"type", "checkpoint_failed"},
                                {"step", r.step},
                                {"error", r.error},
                                {"in_a_row", r.in_a_row},
                                {"newest_valid", r.newest_valid}});
  }
}

void ProgressMetricsRecorder::note(const std::string& text) { progress_->info(text); }

void ProgressMetricsRecorder::warning(const std::string& text) { progress_->line(text); }

void ProgressMetricsRecorder::preempted(int64_t step, const std::string& checkpoint) {
  progress_->line("preempted at step " + std::to_string(step) + ", checkpoint " + checkpoint);
  if (metrics_) {
    emit(nlohmann::ordered_json{{"type", "preempted"}, {"step", step}, {"checkpoint", checkpoint}});
  }
}

void ProgressMetricsRecorder::reformed(const ReformRecord& r) {
  if (r.next_step_unix_ms > r.detected_unix_ms) {
    goodput_->reform(static_cast<double>(r.next_step_unix_ms - r.detected_unix_ms) / 1000.0);
  }
  if (!metrics_) return;
  emit(nlohmann::ordered_json{{"type", "reform"},
                              {"cause", r.cause},
                              {"step", r.step},
                              {"epoch", r.epoch},
                              {"world_size", r.world_size},
                              {"detected_unix_ms", r.detected_unix_ms},
                              {"reform_ms", r.reform_ms},
                              {"next_step_unix_ms", r.next_step_unix_ms}});
}

void ProgressMetricsRecorder::balanced(const BalanceRecord& r) {
  std::string shares;
  for (const int64_t s : r.shares) shares += (shares.empty() ? "" : "/") + std::to_string(s);
  if (r.reason == "auto") {
    std::string rates;
    for (const double v : r.rates) {
      rates += (rates.empty() ? "" : "/") + std::to_string(static_cast<int64_t>(std::lround(v)));
    }
    char gain[32];
    std::snprintf(gain, sizeof(gain), "%.2fx", r.predicted_speedup);
    progress_->info("balance after step " + std::to_string(r.step) + ": shares " + shares +
                    " of the global batch (compute rates " + rates + " samples/s; predicted " +
                    gain + " faster compute)");
  }
  if (!metrics_) return;
  emit(nlohmann::ordered_json{{"type", "balance"},
                              {"reason", r.reason},
                              {"step", r.step},
                              {"shares", r.shares},
                              {"rates", r.rates},
                              {"predicted_speedup", r.predicted_speedup}});
}

void ProgressMetricsRecorder::stepsEnded() { progress_->finish(); }

void ProgressMetricsRecorder::trained(int64_t last_step, int64_t steps, double seconds) {
  char text[96];
  std::snprintf(text, sizeof(text), "trained %lld steps in %.3f s", static_cast<long long>(steps),
                seconds);
  progress_->info(text);
  if (metrics_) {
    emit(nlohmann::ordered_json{
        {"type", "trained"}, {"step", last_step}, {"steps", steps}, {"seconds", seconds}});
    emitGoodput(last_step);
  }
}

void ProgressMetricsRecorder::finished(const RunSummary& s) {
  if (metrics_) {
    nlohmann::ordered_json record{{"type", "summary"}, {"steps", s.steps}, {"epochs", s.epochs}};
    if (s.evaluated) record["test_loss"] = s.test.loss;
    if (s.evaluated && s.test.accuracy) record["test_accuracy"] = *s.test.accuracy;
    record["wall_seconds"] = s.wall_seconds;
    record["parameters"] = s.parameters;
    record["world_size"] = options_.world_size;
    if (!options_.compression.empty()) record["compression"] = options_.compression;
    addCommCounters(record, s.comm_bytes_sent, s.outer_rounds, s.outer_wait_seconds);
    emit(record);
  }
  if (!s.parameter_digest.empty()) progress_->info("final parameters sha256 " + s.parameter_digest);
  char text[320];
  char result[64];
  if (!s.evaluated) {
    std::snprintf(result, sizeof(result), "trained");
  } else if (s.test.accuracy) {
    std::snprintf(result, sizeof(result), "test accuracy %.4f (loss %.4f)", *s.test.accuracy,
                  s.test.loss);
  } else {
    std::snprintf(result, sizeof(result), "test loss %.4f", s.test.loss);
  }
  std::snprintf(text, sizeof(text), "%s after %s epochs, %lld steps, %.1f s", result,
                formatEpochs(s.epochs).c_str(), static_cast<long long>(s.steps), s.wall_seconds);
  std::string line = text;
  // What this rank sent, where it sent anything: alone the line ends as it always did.
  if (s.comm_bytes_sent > 0) {
    std::snprintf(text, sizeof(text), ", %.1f MB sent",
                  static_cast<double>(s.comm_bytes_sent) / 1e6);
    line += text;
  }
  if (s.outer_rounds >= 0) {
    std::snprintf(text, sizeof(text), ", %lld outer rounds (%.1f s waiting)",
                  static_cast<long long>(s.outer_rounds), s.outer_wait_seconds);
    line += text;
  }
  progress_->info(line);
}

void ProgressMetricsRecorder::emit(const nlohmann::ordered_json& record) {
  if (!metrics_) return;
  const nlohmann::ordered_json stamped = metrics_->write(record);
  for (const auto& sink : options_.sinks) sink->record(stamped);
}

void ProgressMetricsRecorder::emitGoodput(int64_t step) {
  nlohmann::ordered_json record{{"type", "goodput"}, {"step", step}};
  record.update(goodput_->at(wallNow()).toJson());
  emit(record);
}

void ProgressMetricsRecorder::publishRankStatus(const StepRecord& r, double loss,
                                                double samples_per_sec) {
  if (std::none_of(options_.sinks.begin(), options_.sinks.end(),
                   [](const auto& sink) { return sink->takesStatus(); })) {
    return;
  }
  const double share = window_.samples > 0 ? static_cast<double>(window_.local_samples) /
                                                 static_cast<double>(window_.samples)
                                           : 0;
  const double now = wallNow();
  nlohmann::ordered_json status{
      {"rank", options_.rank},
      {"step", r.step},
      {"epoch", r.epoch},
      {"samples_per_sec", samples_per_sec * share},
      {"samples", window_.steps > 0 ? window_.local_samples / window_.steps : 0},
      {"step_time_ms", perStepMs(window_.seconds, window_.steps)},
      {"compute_ms", perStepMs(window_.seconds - window_.comm_wait, window_.steps)},
      {"comm_wait_ms", perStepMs(window_.comm_wait, window_.steps)},
      {"loss", loss},
      {"goodput", goodput_->at(now).toJson()},
      {"time", now}};
  if (options_.add_to_status) options_.add_to_status(status);
  for (const auto& sink : options_.sinks) sink->rankStatus(status);
}

}  // namespace cumulus::metrics
