#include "launch/job_metrics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "comm/store.h"
#include "comm/store_keys.h"

namespace cumulus::launch {
namespace {

double systemNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<double> numberAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// A sample value as Prometheus writes one: integers without a fraction, NaN and infinities by
// name, the rest with enough digits to read back the same double.
std::string sampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char text[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", v);
  } else {
    std::snprintf(text, sizeof(text), "%.17g", v);
  }
  return text;
}

// A label value, escaped as the text format wants (backslash, double quote, newline).
std::string labelValue(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Distinct names of the program's own series shown at /metrics (one time series each).
constexpr size_t kMaxScalars = 256;

constexpr const char* kGoodputCategories[] = {"startup",    "training",   "comm_wait",
                                              "evaluation", "checkpoint", "reform",
                                              "restart",    "redone",     "other"};

}  // namespace

// Writes one metric family: its HELP and TYPE lines, then its samples.
class PrometheusText {
 public:
  void family(const std::string& name, const char* type, const std::string& help) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, double value, const std::string& label = "",
              const std::string& label_value = "") {
    out_ << name;
    if (!label.empty()) out_ << '{' << label << "=\"" << labelValue(label_value) << "\"}";
    out_ << ' ' << sampleValue(value) << '\n';
  }
  // A sample with several labels, in the order given.
  void sample(const std::string& name, double value,
              const std::vector<std::pair<std::string, std::string>>& labels) {
    out_ << name << '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      out_ << (i > 0 ? "," : "") << labels[i].first << "=\"" << labelValue(labels[i].second) << '"';
    }
    out_ << "} " << sampleValue(value) << '\n';
  }
  // A family of one sample.
  void gauge(const std::string& name, const std::string& help, double value) {
    family(name, "gauge", help);
    sample(name, value);
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

JobMetrics::JobMetrics(std::string run_id, Clock clock)
    : run_id_(std::move(run_id)), clock_(clock ? std::move(clock) : Clock(systemNow)) {}

void JobMetrics::agentEvent(const std::string& event, int64_t generation, int64_t world_size,
                            const std::string& cause, int64_t rank) {
  nlohmann::json record{
      {"type", "agent"}, {"event", event}, {"generation", generation}, {"world_size", world_size}};
  if (!cause.empty()) record["cause"] = cause;
  if (rank >= 0) record["rank"] = rank;
  record["time"] = clock_();
  base::MutexLock lock(mutex_);
  if (event == "start" || event == "restart") {
    generation_ = generation;
    world_size_ = world_size;
  }
  if (event == "failure") ++failures_[cause.empty() ? "unknown" : cause];
  if (event == "preemption") ++preemptions_;
  if (event == "restart") ++restarts_;
  if (event == "join" && cause == "replacement") ++replacements_;
  records_.push_back(std::move(record));
}

void JobMetrics::setState(const std::string& state) {
  base::MutexLock lock(mutex_);
  state_ = state;
}

void JobMetrics::addRecord(const nlohmann::json& record) {
  base::MutexLock lock(mutex_);
  addLocked(record);
}

void JobMetrics::foldRecord(const nlohmann::json& record) {
  base::MutexLock lock(mutex_);
  if (record.is_object()) countAndFold(record);
}

void JobMetrics::addLocked(nlohmann::json record) {
  if (!record.is_object()) return;
  countAndFold(record);
  records_.push_back(std::move(record));
}

void JobMetrics::countAndFold(const nlohmann::json& record) {
  try {
    fold(record);
  } catch (const nlohmann::json::exception&) {
    // A field of another type than the trainer writes ({"step":"x"}): the record is kept for the
    // dashboard, which shows what it can, but says nothing to the metrics.
    ++malformed_;
  }
  ++received_;
}

void JobMetrics::fold(const nlohmann::json& record) {
  const std::string type = record.value("type", "");
  // Each branch reads every field it needs before it changes anything, so a record that throws
  // changes nothing.
  if (type == "train") {
    train_ = record;
  } else if (type == "eval") {
    test_loss_ = numberAt(record, "test_loss");
    test_accuracy_ = numberAt(record, "test_accuracy");
  } else if (type == "checkpoint") {
    const int64_t step = record.value("step", int64_t{0});
    ++checkpoints_;
    last_checkpoint_step_ = step;
    last_checkpoint_time_ = numberAt(record, "time").value_or(clock_());
  } else if (type == "checkpoint_failed") {
    ++checkpoint_failures_;
  } else if (type == "reform") {
    const std::string cause = record.value("cause", std::string("unknown"));
    const int64_t epoch = record.value("epoch", membership_epoch_);
    const int64_t world_size = record.value("world_size", world_size_);
    ++reformings_[cause];
    membership_epoch_ = epoch;
    world_size_ = world_size;
  } else if (type == "resume") {
    world_size_ = record.value("world_size", world_size_);
  } else if (type == "scalar") {
    const std::string name = record.at("name").get<std::string>();
    const std::optional<double> value = numberAt(record, "value");  // null: NaN or infinite
    if (value && (scalars_.count(name) > 0 || scalars_.size() < kMaxScalars)) {
      scalars_[name] = *value;
    }
  } else if (type == "balance" && record.contains("shares")) {
    shares_ = record["shares"].get<std::vector<int64_t>>();
  } else if (type == "goodput") {
    const double time = numberAt(record, "time").value_or(0);
    if (time >= goodput_time_) {
      goodput_ = record;
      goodput_time_ = time;
    }
  }
}

void JobMetrics::setRankStatus(int64_t rank, const nlohmann::json& status) {
  base::MutexLock lock(mutex_);
  // Merged: a rank's recorder and its torch.distributed backend (CommMetrics) each send theirs.
  nlohmann::json& kept = ranks_[rank];
  if (kept.is_object() && status.is_object()) {
    kept.update(status);
  } else {
    kept = status;
  }
  const auto goodput = status.find("goodput");
  const double time = numberAt(status, "time").value_or(0);
  if (rank == 0 && goodput != status.end() && goodput->is_object() && time >= goodput_time_) {
    goodput_ = *goodput;
    goodput_time_ = time;
  }
}

void JobMetrics::poll(comm::Store& store) {
  const int64_t count = store.add(comm::metricsRecordCountKey(), 0);
  for (;;) {
    int64_t n = 0;
    {
      base::MutexLock lock(mutex_);
      if (next_record_ >= count) break;
      n = next_record_;
    }
    const std::string key = comm::metricsRecordKey(n);
    const std::optional<std::string> value = store.tryGet(key);
    base::MutexLock lock(mutex_);
    if (!value) {
      // Taken but not written yet; or never, if its sender died in between.
      const double now = clock_();
      if (missing_since_ == 0) missing_since_ = now;
      if (now - missing_since_ < 5.0) break;
      missing_since_ = 0;
      ++next_record_;
      continue;
    }
    missing_since_ = 0;
    ++next_record_;
    addLocked(nlohmann::json::parse(*value, nullptr, /*allow_exceptions=*/false));
    store.remove(key);
  }
  int64_t ranks = 0;
  {
    base::MutexLock lock(mutex_);
    ranks = std::max<int64_t>(world_size_, 1);
  }
  for (int64_t r = 0; r < ranks; ++r) {
    const std::optional<std::string> value = store.tryGet(comm::metricsRankKey(r));
    if (!value) continue;
    const nlohmann::json status = nlohmann::json::parse(*value, nullptr, false);
    if (status.is_object()) setRankStatus(r, status);
  }
}

double JobMetrics::counter(const std::string& name, double value) const {
  double& highest = exported_[name];
  highest = std::max(highest, value);
  return highest;
}

std::string JobMetrics::prometheus() const {
  base::MutexLock lock(mutex_);
  PrometheusText out;
  exposeJob(out);
  exposeRanks(out);
  exposeGoodput(out);
  exposeEvents(out);
  exposeComm(out);
  return out.text();
}

void JobMetrics::exposeJob(PrometheusText& out) const {
  out.family("cumulus_up", "gauge", "1 for the job's state (running, finished, failed, preempted)");
  out.sample("cumulus_up", 1, "state", state_);
  out.gauge("cumulus_step", "completed steps (the newest train record)",
            numberAt(train_, "step").value_or(0));
  out.gauge("cumulus_epoch", "the epoch of the newest train record",
            numberAt(train_, "epoch").value_or(0));
  out.gauge("cumulus_world_size", "workers in the group", static_cast<double>(world_size_));
  out.gauge("cumulus_membership_epoch", "in-place membership epoch (re-formings so far)",
            static_cast<double>(membership_epoch_));
  out.gauge("cumulus_generation", "the launcher's group generation (restarts so far)",
            static_cast<double>(generation_));
  if (const auto loss = numberAt(train_, "loss")) {
    out.gauge("cumulus_loss", "training loss, mean over the steps since the last record", *loss);
  }
  if (test_loss_)
    out.gauge("cumulus_test_loss", "test-set loss of the last evaluation", *test_loss_);
  if (!scalars_.empty()) {
    out.family("cumulus_scalar", "gauge",
               "the newest value of each series a loop records itself (Recorder::scalar)");
    for (const auto& [name, value] : scalars_) out.sample("cumulus_scalar", value, "name", name);
  }
  if (test_accuracy_) {
    out.gauge("cumulus_test_accuracy", "test-set accuracy of the last evaluation", *test_accuracy_);
  }
  out.gauge("cumulus_samples_per_second", "the job's training throughput",
            numberAt(train_, "samples_per_sec").value_or(0));
}

void JobMetrics::exposeRanks(PrometheusText& out) const {
  struct RankSeries {
    const char* name;
    const char* key;
    double scale;
    const char* help;
  };
  const RankSeries rank_series[] = {
      {"cumulus_rank_samples_per_second", "samples_per_sec", 1,
       "each rank's share of the batch over the step time"},
      {"cumulus_rank_step_seconds", "step_time_ms", 1e-3, "each rank's mean step time"},
      {"cumulus_rank_comm_wait_seconds", "comm_wait_ms", 1e-3,
       "each rank's mean wait for the gradient sync per step"},
  };
  for (const RankSeries& series : rank_series) {
    out.family(series.name, "gauge", series.help);
    for (const auto& [rank, status] : ranks_) {
      if (world_size_ > 0 && rank >= world_size_) continue;
      if (const auto v = numberAt(status, series.key)) {
        out.sample(series.name, *v * series.scale, "rank", std::to_string(rank));
      }
    }
  }
  exposeCollectives(out);
  out.family("cumulus_batch_share_samples", "gauge", "each rank's share of the global batch");
  const std::vector<int64_t> shares = sharesLocked();
  for (size_t r = 0; r < shares.size(); ++r) {
    out.sample("cumulus_batch_share_samples", static_cast<double>(shares[r]), "rank",
               std::to_string(r));
  }
}

// Each rank's collectives by kind (its status's "collectives": a Recorder's or the backend's
// CommMetrics), and the bytes it sent: cumulative over the rank's group, as the status says.
void JobMetrics::exposeCollectives(PrometheusText& out) const {
  struct OpSeries {
    const char* name;
    const char* key;
    const char* help;
  };
  const OpSeries op_series[] = {
      {"cumulus_collectives_total", "count", "collectives each rank ran, by kind"},
      {"cumulus_collective_seconds_total", "seconds",
       "seconds each rank's collectives executed, by kind"},
      {"cumulus_collective_bytes_sent_total", "bytes_sent",
       "bytes each rank handed to its transport during its collectives, by kind"},
  };
  for (const OpSeries& series : op_series) {
    bool any = false;
    for (const auto& [rank, status] : ranks_) {
      if (world_size_ > 0 && rank >= world_size_) continue;
      const auto ops = status.find("collectives");
      if (ops == status.end() || !ops->is_object()) continue;
      for (const auto& [op, stats] : ops->items()) {
        const auto v = stats.is_object() ? numberAt(stats, series.key) : std::nullopt;
        if (!v) continue;
        if (!any) out.family(series.name, "counter", series.help);
        any = true;
        out.sample(series.name, *v, {{"rank", std::to_string(rank)}, {"op", op}});
      }
    }
  }
  bool any = false;
  for (const auto& [rank, status] : ranks_) {
    if (world_size_ > 0 && rank >= world_size_) continue;
    const auto v = numberAt(status, "comm_bytes_sent");
    if (!v) continue;
    if (!any) {
      out.family("cumulus_rank_comm_bytes_sent_total", "counter",
                 "bytes each rank handed to its transport since its group was made");
    }
    any = true;
    out.sample("cumulus_rank_comm_bytes_sent_total", *v, "rank", std::to_string(rank));
  }
}

void JobMetrics::exposeGoodput(PrometheusText& out) const {
  out.family("cumulus_goodput_seconds_total", "counter",
             "where the run's wall time went, by category (docs/observability.md)");
  for (const char* category : kGoodputCategories) {
    const std::string key = std::string(category) + "_s";
    out.sample("cumulus_goodput_seconds_total",
               counter(key, numberAt(goodput_, key.c_str()).value_or(0)), "category", category);
  }
  out.family("cumulus_wall_seconds_total", "counter", "the run's wall time the goodput covers");
  out.sample("cumulus_wall_seconds_total",
             counter("wall_s", numberAt(goodput_, "wall_s").value_or(0)));
  out.gauge("cumulus_goodput_ratio", "productive time (training and comm wait) over wall time",
            numberAt(goodput_, "productive_ratio").value_or(0));
}

void JobMetrics::exposeEvents(PrometheusText& out) const {
  struct Count {
    const char* name;
    int64_t value;
    const char* help;
  };
  const Count counts[] = {
      {"cumulus_preemptions_total", preemptions_, "preempted stops of the group"},
      {"cumulus_restarts_total", restarts_, "restarts of the whole group"},
      {"cumulus_replacements_total", replacements_,
       "workers started in place of dead ones (each counts against --max-restarts)"},
      {"cumulus_checkpoints_total", checkpoints_, "checkpoints committed"},
      {"cumulus_checkpoint_failures_total", checkpoint_failures_, "checkpoints that failed"},
      {"cumulus_live_records_total", received_, "records received from the workers"},
      {"cumulus_live_records_malformed_total", malformed_,
       "of those, records with a field of an unexpected type (shown, not counted)"},
  };
  for (const Count& c : counts) {
    out.family(c.name, "counter", c.help);
    out.sample(c.name, static_cast<double>(c.value));
  }
  out.family("cumulus_failures_total", "counter", "workers that died, by cause");
  for (const auto& [cause, n] : failures_) {
    out.sample("cumulus_failures_total", static_cast<double>(n), "cause", cause);
  }
  out.family("cumulus_reformings_total", "counter", "in-place re-formings, by cause");
  for (const auto& [cause, n] : reformings_) {
    out.sample("cumulus_reformings_total", static_cast<double>(n), "cause", cause);
  }
  if (last_checkpoint_step_) {
    out.gauge("cumulus_last_checkpoint_step", "the step of the newest committed checkpoint",
              static_cast<double>(*last_checkpoint_step_));
    out.gauge("cumulus_last_checkpoint_age_seconds", "seconds since it committed",
              std::max(0.0, clock_() - last_checkpoint_time_));
  }
}

// The newest train record's communication counters. Cumulative over a launch, so a restarted
// launch counts again from 0: counter() holds the highest value until it is passed.
void JobMetrics::exposeComm(PrometheusText& out) const {
  out.family("cumulus_comm_bytes_sent_total", "counter",
             "bytes rank 0 handed to its transport since the launch began");
  out.sample("cumulus_comm_bytes_sent_total",
             counter("comm_bytes_sent", numberAt(train_, "comm_bytes_sent").value_or(0)));
  // Only low-communication training has outer rounds: absent otherwise.
  if (const auto rounds = numberAt(train_, "outer_rounds")) {
    out.family("cumulus_outer_rounds_total", "counter", "outer rounds completed (rank 0's)");
    out.sample("cumulus_outer_rounds_total", counter("outer_rounds", *rounds));
  }
  if (const auto wait = numberAt(train_, "outer_wait_s")) {
    out.family("cumulus_outer_wait_seconds_total", "counter",
               "seconds rank 0 waited on the outer rounds");
    out.sample("cumulus_outer_wait_seconds_total", counter("outer_wait_s", *wait));
  }
}

std::vector<int64_t> JobMetrics::sharesLocked() const {
  if (!shares_.empty()) return shares_;
  // Balance off: no balance record; each rank's status says its samples per step.
  std::vector<int64_t> shares;
  for (int64_t r = 0; r < world_size_; ++r) {
    const auto it = ranks_.find(r);
    const auto samples = it == ranks_.end() ? std::nullopt : numberAt(it->second, "samples");
    if (!samples) return {};
    shares.push_back(static_cast<int64_t>(*samples));
  }
  return shares;
}

nlohmann::json JobMetrics::status() const {
  base::MutexLock lock(mutex_);
  const double now = clock_();
  nlohmann::json out{{"run_id", run_id_},
                     {"state", state_},
                     {"generation", generation_},
                     {"world_size", world_size_},
                     {"membership_epoch", membership_epoch_}};
  for (const char* key : {"step", "epoch", "loss", "samples_per_sec"}) {
    out[key] = train_.is_object() && train_.contains(key) ? train_[key] : nlohmann::json();
  }
  out["test_loss"] = test_loss_ ? nlohmann::json(*test_loss_) : nlohmann::json();
  out["test_accuracy"] = test_accuracy_ ? nlohmann::json(*test_accuracy_) : nlohmann::json();
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& [rank, status] : ranks_) {
    if (world_size_ > 0 && rank >= world_size_) continue;
    nlohmann::json r = status;
    r["rank"] = rank;
    if (static_cast<size_t>(rank) < shares_.size()) {
      r["share"] = shares_[rank];
    } else if (const auto samples = numberAt(status, "samples")) {
      r["share"] = *samples;
    }
    ranks.push_back(std::move(r));
  }
  out["ranks"] = std::move(ranks);
  out["shares"] = sharesLocked();
  nlohmann::json goodput = goodput_.is_object() ? goodput_ : nlohmann::json::object();
  goodput.erase("type");
  goodput.erase("step");
  goodput.erase("time");
  out["goodput"] = std::move(goodput);
  int64_t failures = 0, reformings = 0;
  for (const auto& entry : failures_) failures += entry.second;
  for (const auto& entry : reformings_) reformings += entry.second;
  out["counts"] = {{"preemptions", preemptions_},   {"failures", failures},
                   {"reforms", reformings},         {"restarts", restarts_},
                   {"replacements", replacements_}, {"checkpoints", checkpoints_}};
  if (last_checkpoint_step_) {
    out["last_checkpoint"] = {{"step", *last_checkpoint_step_},
                              {"age_s", std::max(0.0, now - last_checkpoint_time_)}};
  } else {
    out["last_checkpoint"] = nullptr;
  }
  return out;
}

nlohmann::json JobMetrics::records(int64_t after, int64_t max) const {
  base::MutexLock lock(mutex_);
  const int64_t size = static_cast<int64_t>(records_.size());
  const int64_t begin = std::clamp<int64_t>(after, 0, size);
  const int64_t end = std::min(size, begin + std::max<int64_t>(max, 0));
  nlohmann::json list = nlohmann::json::array();
  for (int64_t i = begin; i < end; ++i) list.push_back(records_[i]);
  return {{"next", end}, {"records", std::move(list)}};
}

}  // namespace cumulus::launch
