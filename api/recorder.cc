// Recorder (<cumulus/recorder.h>): an Elastic loop's records through the same recorder, sinks and
// goodput account cumulus-train uses (metrics/): a ProgressMetricsRecorder for each membership,
// the process's TensorBoard and live-publisher sinks, and ElasticTimes turned into the split.

#include "cumulus/recorder.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "api/recorder_hooks.h"
#include "base/run_env.h"
#include "cumulus/diloco.h"
#include "cumulus/elastic.h"
#include "cumulus/process_group.h"
#include "metrics/comm_bytes.h"
#include "metrics/goodput.h"
#include "metrics/progress.h"
#include "metrics/recorder.h"
#include "metrics/run_records.h"
#include "metrics/store_publisher.h"

namespace cumulus {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double wallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Names the records and TensorBoard already use: a scalar of the program's may not take one.
bool builtIn(const std::string& name) {
  for (const char* prefix : {"train/", "eval/", "goodput/", "checkpoint/"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  for (const char* key : {"loss", "lr", "samples_per_sec", "step_time_ms", "compute_ms",
                          "comm_wait_ms", "comm_bytes_sent", "test_loss", "test_accuracy"}) {
    if (name == key) return true;
  }
  return false;
}

}  // namespace

struct Recorder::Impl {
  Elastic& elastic;
  RecorderOptions options;
  base::RunEnv env;
  metrics::RunRecords records;
  RecorderHooks hooks;
  int64_t epoch = -1;      // the membership the current recorder is for; -1: none yet
  int rank = 0, size = 1;  // its rank and size
  bool begun = false;
  bool stepped = false;  // step() was called (the launch's first step is marked once)
  bool finished = false;
  ElasticTimes seen;  // Elastic's times at the last step()
  double started = now();
  int64_t dropped = 0;
  std::optional<metrics::Evaluation> last_evaluation;
  // The program's series since they were last written: their sum, count and last step, written as
  // one "scalar" record each (the mean) when a value comes at a step with a train record, so
  // that a value logged every step costs the other steps no file write.
  struct Pending {
    double sum = 0;
    int64_t count = 0;
    int64_t step = 0;
    bool finite = true;  // no NaN or infinity among them
  };
  std::map<std::string, Pending> scalars;
  // Seconds of the program's saves timed by checkpoint() since Elastic's checkpoint time was last
  // taken into the account: a save after a kCheckpoint boundary is in both, and counted once.
  double timed_checkpoint = 0;
  int64_t failed_saves = 0;              // in a row
  std::string newest_saved;              // the last path checkpoint() saw saved
  metrics::CommBytesCounter comm_bytes;  // over every group of the launch

  // Elastic's checkpoint time since the last look, less what checkpoint() already counted.
  void accountCheckpoint(double elastic_seconds) {
    records.goodput()->checkpointStall(std::max(0.0, elastic_seconds - timed_checkpoint));
    timed_checkpoint = 0;
  }

  // A save that committed: the failures in a row end, its record is written and its stall counted
  // (once: accountCheckpoint() leaves it out of Elastic's checkpoint time).
  void saved(const CheckpointSaved& s) {
    failed_saves = 0;
    newest_saved = s.path;
    if (!begun || elastic.left()) return;
    metrics::CheckpointRecord record;
    record.step = s.step;
    record.path = s.path;
    record.stall_ms = 1000.0 * s.stall_seconds;
    record.encode_seconds = s.encode_seconds;
    record.write_seconds = s.write_seconds;
    record.bytes = s.bytes;
    record.warnings = s.warnings;
    records.recorder().checkpoint(record);  // its stall goes into the goodput's checkpoint time
    timed_checkpoint += s.stall_seconds;
  }

  void failed(int64_t step, const std::string& error, int64_t max_failures) {
    ++failed_saves;
    if (!begun || elastic.left()) return;
    metrics::CheckpointFailureRecord record;
    record.step = step;
    record.error = error;
    record.in_a_row = failed_saves;
    record.max_failures = max_failures;
    record.newest_valid = newest_saved;
    records.recorder().checkpointFailed(record);
  }

  bool recordsAt(int64_t step) const {
    return step == 1 || step == options.total_steps ||
           (options.log_every_steps > 0 && step % options.log_every_steps == 0);
  }

  void flushScalars() {
    for (const auto& [name, p] : scalars) {
      const double mean = p.finite ? p.sum / static_cast<double>(p.count)
                                   : std::numeric_limits<double>::quiet_NaN();
      records.recorder().scalar(p.step, name, mean);
    }
    scalars.clear();
  }

  Impl(Elastic& e, RecorderOptions o)
      : elastic(e),
        options(std::move(o)),
        env(base::RunEnv::fromEnvironment(base::memberEnvironment)),
        records(
            options.run_dir.empty() || !options.tensorboard ? "" : options.run_dir + "/tensorboard",
            &std::cerr) {
    if (!options.live) env.live_metrics = false;
  }

  bool writes() const { return elastic.rank() == 0 && !options.run_dir.empty(); }

  // The sum over the group's members at a record, as a boundary's work: a failure during it
  // re-forms the group, and the record shows this member's share scaled to the group instead.
  double sumOverMembers(double value) {
    double sum = value * elastic.size();
    elastic.atBoundary([&] {
      torch::Tensor t = torch::full({1}, value, torch::kFloat64);
      elastic.group().allreduce(t);
      sum = t.item<double>();
    });
    return sum;
  }

  // A recorder for the membership now; the first one begins the records, a later one begins
  // again where the group trains from (a new writer continues metrics.jsonl).
  void forMembership() {
    if (writes()) {
      std::error_code error;
      std::filesystem::create_directories(options.run_dir, error);
      if (error) {
        throw std::runtime_error("Recorder: cannot create the run directory " + options.run_dir +
                                 ": " + error.message());
      }
    }
    metrics::ProgressRecorderOptions o;
    o.console = options.console;
    o.live = options.live_progress;
    o.quiet = metrics::Progress::quietFor(elastic.rank(), options.log_all_ranks);
    o.log_every_steps = options.log_every_steps;
    if (writes()) o.metrics_path = options.run_dir + "/metrics.jsonl";
    o.world_size = elastic.size();
    if (elastic.size() > 1) {
      o.compression = options.compression;
      o.sum_over_ranks = [this](double v) { return sumOverMembers(v); };
    }
    o.rank = elastic.rank();
    if (elastic.size() > 1) {
      o.add_to_status = [this](nlohmann::ordered_json& status) {
        metrics::addCollectives(status, elastic.group().collectiveStats(),
                                elastic.group().bytesSent());
      };
    }
    o.goodput = records.goodput();
    env.rank = elastic.rank();
    env.world_size = elastic.size();
    o.sinks = records.sinks(o.rank == 0 && !options.run_dir.empty(), env);
    std::shared_ptr<metrics::MetricsRecorder> standard =
        std::make_shared<metrics::ProgressMetricsRecorder>(std::move(o));
    records.use(hooks.wrap ? hooks.wrap(std::move(standard)) : std::move(standard));
    const int64_t steps_per_epoch = std::max<int64_t>(
        1, options.steps_per_epoch > 0 ? options.steps_per_epoch : options.total_steps);
    epoch = elastic.membership().epoch;
    rank = elastic.rank();
    size = elastic.size();
    if (!begun) {
      metrics::GoodputHistory history;
      if (writes() && options.start_step > 0) {
        history =
            metrics::readGoodputHistory(options.run_dir + "/metrics.jsonl", options.start_step);
      }
      metrics::RunStart start{
          options.model, {}, options.start_step, options.total_steps, steps_per_epoch};
      if (options.precision) {
        start.precision = precisionName(options.precision->precision);
        start.precision_requested = precisionName(options.precision->requested);
        start.precision_reason = options.precision->reason;
        start.precision_warning = options.precision->warning;
      }
      records.begin(std::move(start), metrics::launchExecTime(), history);
      begun = true;
      return;
    }
    const Membership& m = elastic.membership();
    records.recorder().begin(
        metrics::RunStart{"", {}, m.step, options.total_steps, steps_per_epoch});
  }

  // The records, begun for the membership now: after a re-forming, the new one's recorder, a
  // "reform" record (written once the next step completed) and a line on every member.
  // The membership is the one formed (Elastic::membership()): a line said while one is still
  // forming (the state a member sends a joiner) goes to the membership before it.
  void follow() {
    const bool first = !begun;
    if (begun && elastic.membership().epoch == epoch) return;
    const int was_rank = rank, was_size = size;
    forMembership();
    const Membership& now_m = elastic.membership();
    // The first records of a launch whose group had re-formed already (a replacement admitted, a
    // peer lost during start()) tell it too.
    if (first && now_m.epoch == 0) return;
    metrics::ReformRecord record;
    record.cause = now_m.cause;
    record.step = now_m.step;
    record.epoch = now_m.epoch;
    record.world_size = now_m.size;
    record.reform_ms = 1000.0 * now_m.seconds;
    records.reformed(record);
    char took[32];
    std::snprintf(took, sizeof(took), "%.0f ms", record.reform_ms);
    std::string line = "re-formed in place: epoch " + std::to_string(now_m.epoch) + ", rank " +
                       std::to_string(now_m.rank) + " of " + std::to_string(now_m.size);
    if (!first && (was_rank != now_m.rank || was_size != now_m.size)) {
      line += " (was rank " + std::to_string(was_rank) + " of " + std::to_string(was_size) + ")";
    }
    line += ", training from step " + std::to_string(now_m.step) + " in " + took;
    if (!now_m.healed.empty()) {
      line += "; state sent by rank " + std::to_string(now_m.source) + " to rank(s) ";
      for (size_t i = 0; i < now_m.healed.size(); ++i) {
        line += (i > 0 ? "," : "") + std::to_string(now_m.healed[i]);
      }
    }
    records.warning(line);
  }

  uint64_t bytesSent() { return comm_bytes.total(elastic.size() > 1 ? &elastic.group() : nullptr); }

  int64_t epochOf(int64_t step) const {
    const int64_t per = options.steps_per_epoch > 0 ? options.steps_per_epoch : 0;
    return per > 0 ? (step - 1) / per + 1 : 1;
  }

  void check(const char* what) const {
    if (finished) {
      throw std::logic_error(std::string("Recorder::") + what + " after finish() or preempted()");
    }
  }
};

Recorder::Recorder(Elastic& elastic, RecorderOptions options)
    : impl_(std::make_unique<Impl>(elastic, std::move(options))) {
  const RecorderOptions& o = impl_->options;
  if (o.total_steps < 0 || o.steps_per_epoch < 0 || o.log_every_steps < 0 || o.start_step < 0) {
    throw std::invalid_argument(
        "RecorderOptions: total_steps, steps_per_epoch, log_every_steps and start_step must be "
        ">= 0");
  }
}

Recorder::~Recorder() = default;

struct RecorderAccess {
  static Recorder::Impl& impl(Recorder& recorder) { return *recorder.impl_; }
};

std::unique_ptr<Recorder> makeRecorder(Elastic& elastic, RecorderOptions options,
                                       RecorderHooks hooks) {
  auto recorder = std::make_unique<Recorder>(elastic, std::move(options));
  RecorderAccess::impl(*recorder).hooks = std::move(hooks);
  return recorder;
}

void Recorder::step(const StepMetrics& s) {
  Impl& m = *impl_;
  m.check("step");
  if (m.elastic.left()) return;
  if (s.samples < 0 || s.global_samples < 0) {
    throw std::invalid_argument("Recorder::step: samples and global_samples must be >= 0");
  }
  if (s.comm_wait_seconds > s.seconds && s.seconds >= 0) {
    throw std::invalid_argument("Recorder::step: comm_wait_seconds is more than seconds");
  }
  const bool first = !m.stepped;
  m.stepped = true;
  m.follow();
  const ElasticTimes& t = m.elastic.times();
  const ElasticTimes before = std::exchange(m.seen, t);
  metrics::GoodputAccount& account = *m.records.goodput();
  account.redone(t.redone - before.redone);
  m.accountCheckpoint(t.checkpoint - before.checkpoint);
  const int64_t step = m.elastic.step();
  if (first) m.records.recorder().firstStep(step, m.hooks.startup);
  const int64_t global =
      s.global_samples > 0 ? s.global_samples : s.samples * static_cast<int64_t>(m.elastic.size());
  metrics::StepRecord r;
  r.step = step;
  r.epoch = m.epochOf(step);
  if (std::isfinite(s.loss)) {
    r.loss = global > 0 ? s.loss * static_cast<double>(s.samples) / static_cast<double>(global)
                        : s.loss / m.elastic.size();
  } else {
    r.loss = s.loss;  // written as null; the divergence is the program's to stop
    ++m.dropped;
  }
  r.lr = s.lr;
  r.seconds = s.seconds >= 0 ? s.seconds : t.train - before.train;
  r.comm_wait_seconds =
      s.comm_wait_seconds >= 0 ? s.comm_wait_seconds : t.comm_wait - before.comm_wait;
  r.samples = global;
  r.local_samples = s.samples;
  r.elapsed_seconds = now() - m.started;
  r.comm_bytes_sent = m.bytesSent();
  if (m.options.diloco != nullptr) {
    const DiLoCoStats d = m.options.diloco->stats();
    r.outer_rounds = d.rounds;
    r.outer_wait_seconds = d.wait_seconds;
  }
  m.records.recorder().step(r);
  m.records.afterStep();
}

void Recorder::scalar(const std::string& name, double value) {
  Impl& m = *impl_;
  m.check("scalar");
  if (name.empty() || builtIn(name)) {
    throw std::invalid_argument("Recorder::scalar: '" + name + "' is " +
                                (name.empty() ? "empty" : "a built-in series") +
                                "; name the program's own series otherwise (train/, eval/, "
                                "goodput/ and checkpoint/ are Cumulus's)");
  }
  if (m.elastic.left() || !m.begun) return;
  m.follow();
  Impl::Pending& p = m.scalars[name];
  if (std::isfinite(value)) {
    p.sum += value;
  } else {
    ++m.dropped;
    p.finite = false;  // the window's mean is not a number: written as null
  }
  ++p.count;
  p.step = m.elastic.step();
  if (m.recordsAt(p.step)) m.flushScalars();
}

void Recorder::evaluation(double loss, std::optional<double> accuracy, double seconds) {
  Impl& m = *impl_;
  m.check("evaluation");
  if (m.elastic.left()) return;
  m.follow();
  metrics::Evaluation e;
  e.loss = loss;
  e.accuracy = accuracy;
  e.seconds = std::max(0.0, seconds);
  const int64_t step = m.elastic.step();
  m.records.recorder().evaluation(step, m.epochOf(step), e);
  m.last_evaluation = e;
}

void Recorder::balance(const std::vector<int64_t>& shares, const std::vector<double>& rates,
                       double predicted_speedup, const std::string& reason) {
  Impl& m = *impl_;
  m.check("balance");
  if (reason != "auto" && reason != "start" && reason != "reform") {
    throw std::invalid_argument("Recorder::balance: reason '" + reason +
                                "' is none of auto, start and reform");
  }
  if (m.elastic.left()) return;
  m.follow();
  metrics::BalanceRecord record;
  record.reason = reason;
  record.step = m.elastic.step();
  record.shares = shares;
  record.rates = rates;
  record.predicted_speedup = predicted_speedup;
  m.records.recorder().balanced(record);
}

std::string Recorder::checkpoint(const std::function<std::string()>& save) {
  Impl& m = *impl_;
  m.check("checkpoint");
  if (!save) throw std::invalid_argument("Recorder::checkpoint: an empty save function");
  if (!m.elastic.left()) m.follow();
  const int64_t step = m.elastic.step();
  const double began = now();
  std::string path;
  try {
    path = save();
  } catch (const std::exception& e) {
    m.failed(step, e.what(), 0);  // the program decides when to stop
    throw;
  }
  CheckpointSaved saved;
  saved.step = step;
  saved.path = path;
  saved.stall_seconds = now() - began;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path, error)) {
      if (entry.is_regular_file(error)) saved.bytes += entry.file_size(error);
    }
  } else if (std::filesystem::is_regular_file(path, error)) {
    saved.bytes = std::filesystem::file_size(path, error);
  }
  m.saved(saved);
  return path;
}

void Recorder::checkpointSaved(const CheckpointSaved& saved) {
  Impl& m = *impl_;
  m.check("checkpointSaved");
  if (saved.stall_seconds < 0 || saved.encode_seconds < 0 || saved.write_seconds < 0) {
    throw std::invalid_argument("Recorder::checkpointSaved: negative seconds");
  }
  if (!m.elastic.left()) m.follow();
  m.saved(saved);
}

void Recorder::checkpointFailed(int64_t step, const std::string& error, int64_t max_failures,
                                const std::string& newest_valid) {
  Impl& m = *impl_;
  m.check("checkpointFailed");
  if (max_failures < 0) {
    throw std::invalid_argument("Recorder::checkpointFailed: max_failures must be >= 0");
  }
  if (!m.elastic.left()) m.follow();
  if (!newest_valid.empty()) m.newest_saved = newest_valid;
  m.failed(step, error, max_failures);
}

void Recorder::membershipChanged() {
  Impl& m = *impl_;
  m.check("membershipChanged");
  if (m.begun && !m.elastic.left()) m.follow();
}

void Recorder::preempted(const std::string& checkpoint) {
  Impl& m = *impl_;
  m.check("preempted");
  m.finished = true;
  if (!m.begun || m.elastic.left()) return;
  m.follow();
  const ElasticTimes& t = m.elastic.times();
  m.accountCheckpoint(t.checkpoint - m.seen.checkpoint);  // the save and waitForAll()
  m.seen = t;
  const int64_t step = m.elastic.step();
  m.flushScalars();
  m.records.recorder().preempted(step, checkpoint);
  m.records.recorder().stepsEnded();
  m.records.recorder().trained(step, step - m.options.start_step, now() - m.started);
}

void Recorder::note(const std::string& text) {
  impl_->check("note");
  if (impl_->begun && !impl_->elastic.left()) impl_->follow();
  impl_->records.note(text);
}

void Recorder::warning(const std::string& text) {
  impl_->check("warning");
  if (impl_->begun && !impl_->elastic.left()) impl_->follow();
  impl_->records.warning(text);
}

void Recorder::finish(const RunTotals& totals) {
  Impl& m = *impl_;
  m.check("finish");
  m.finished = true;
  if (!m.begun || m.elastic.left()) return;
  m.follow();
  const int64_t step = m.elastic.step();
  const double seconds = now() - m.started;
  m.flushScalars();
  m.records.recorder().stepsEnded();
  m.records.recorder().trained(step, step - m.options.start_step, seconds);
  metrics::RunSummary summary;
  summary.steps = step;
  const int64_t per = m.options.steps_per_epoch > 0 ? m.options.steps_per_epoch : 0;
  summary.epochs = per > 0 ? static_cast<double>(step) / static_cast<double>(per) : 1.0;
  summary.evaluated = m.last_evaluation.has_value();
  if (m.last_evaluation) summary.test = *m.last_evaluation;
  summary.wall_seconds = seconds;
  summary.comm_bytes_sent = m.bytesSent();
  summary.parameters = totals.parameters;
  summary.parameter_digest = totals.parameter_digest;
  if (m.options.diloco != nullptr) {
    const DiLoCoStats d = m.options.diloco->stats();
    summary.outer_rounds = d.rounds;
    summary.outer_wait_seconds = d.wait_seconds;
  }
  m.records.recorder().finished(summary);
}

Goodput Recorder::goodput() const {
  if (!impl_->records.goodput()->started()) return {};  // no step recorded yet
  const metrics::GoodputSplit s = impl_->records.goodput()->at(wallNow());
  Goodput g;
  g.wall = s.wall_s;
  g.startup = s.startup_s;
  g.training = s.training_s;
  g.comm_wait = s.comm_wait_s;
  g.evaluation = s.evaluation_s;
  g.checkpoint = s.checkpoint_s;
  g.reform = s.reform_s;
  g.restart = s.restart_s;
  g.redone = s.redone_s;
  g.other = s.other_s;
  g.productive_ratio = s.productiveRatio();
  return g;
}

int64_t Recorder::dropped() const { return impl_->dropped; }

struct CommMetrics::Impl {
  const ProcessGroup& group;
  double interval;
  double last = 0;                                     // steady seconds of the last status sent
  std::unique_ptr<metrics::StorePublisher> publisher;  // null: no live metrics asked for

  void send() {
    last = now();
    nlohmann::ordered_json status{{"rank", group.rank()}};
    metrics::addCollectives(status, group.collectiveStats(), group.bytesSent());
    status["time"] = wallNow();
    publisher->rankStatus(status);
  }
};

CommMetrics::CommMetrics(const ProcessGroup& group, double interval_seconds)
    : impl_(std::make_unique<Impl>(Impl{group, interval_seconds, 0, nullptr})) {
  const base::RunEnv env = base::RunEnv::fromEnvironment(base::memberEnvironment);
  if (!env.live_metrics || env.store_host.empty() || env.store_port <= 0) return;
  metrics::StorePublisherOptions o;
  o.rank = group.rank();
  o.warnings = &std::cerr;
  impl_->publisher = std::make_unique<metrics::StorePublisher>(
      env.store_host, static_cast<int>(env.store_port), env.job_token, o);
}

CommMetrics::~CommMetrics() {
  if (impl_->publisher) impl_->send();
}

void CommMetrics::update() {
  if (impl_->publisher && now() - impl_->last >= impl_->interval) impl_->send();
}

}  // namespace cumulus
