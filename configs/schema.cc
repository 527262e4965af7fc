#include "configs/schema.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "base/integer.h"
#include "base/suggest.h"

namespace cumulus::configs {
using base::closestSpelling;
namespace {

// ---------------------------------------------------------------------------------------------
// Typed access to one field. KEY(section, field) builds the accessor and the dotted path from the
// same tokens, so a row's path always names the member it reads and writes.
template <auto Section, auto Field>
struct Member {
  std::string_view path;
  static auto& ref(Experiment& e) { return (e.*Section).*Field; }
  static const auto& ref(const Experiment& e) { return (e.*Section).*Field; }
};
template <auto Field>
struct TopMember {
  std::string_view path;
  static auto& ref(Experiment& e) { return e.*Field; }
  static const auto& ref(const Experiment& e) { return e.*Field; }
};
#define KEY(section, field) \
  Member<&Experiment::section, &decltype(Experiment::section)::field> { #section "." #field }
#define TOP_KEY(field) \
  TopMember<&Experiment::field> { #field }

template <class M>
using FieldType = std::decay_t<decltype(M::ref(std::declval<Experiment&>()))>;

// The option enums are strings in a file and typed in Experiment: a row reads and writes them by
// name, from the enum's table (base/enum_names.h; the public ones' in <cumulus/options.h>, the
// rest in configs/experiment.h), so the digest, the emitted YAML and the reference are unchanged.
// A row's allowed values are the same table (oneOf(base::namesOf<E>())).
template <class E>
void readOption(const std::string& name, E& out) {
  const std::optional<E> value = base::valueNamed<E>(name);
  assert(value && "checkValue refuses a name the enum lacks");
  if (value) out = *value;
}

template <class T>
using Stored = std::conditional_t<std::is_enum_v<T>, std::string, T>;

template <class T>
Stored<T> stored(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return base::nameOf(value);
  } else {
    return value;
  }
}

template <class T>
void load(const Stored<T>& value, T& out) {
  if constexpr (std::is_enum_v<T>) {
    readOption(value, out);
  } else {
    out = value;
  }
}

template <class T>
constexpr ValueType valueTypeOf() {
  if constexpr (std::is_enum_v<T>) return ValueType::kString;
  if constexpr (std::is_same_v<T, std::string>) return ValueType::kString;
  if constexpr (std::is_same_v<T, int64_t>) return ValueType::kInt;
  if constexpr (std::is_same_v<T, uint64_t>) return ValueType::kUInt;
  if constexpr (std::is_same_v<T, double>) return ValueType::kDouble;
  if constexpr (std::is_same_v<T, bool>) return ValueType::kBool;
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return ValueType::kIntList;
}

// What a row allows besides its type.
struct Rule {
  Bounds bounds;
  std::vector<std::string_view> choices;
  std::string_view choice_prefix;
  FormatCheck format = nullptr;
  std::string_view format_text;
  bool required = false;
};

Rule anyValue() { return {}; }
Rule bounded(Bounds bounds) {
  Rule rule;
  rule.bounds = bounds;
  return rule;
}
Rule atLeast(double min) { return bounded({min, false}); }
Rule above(double min) { return bounded({min, true}); }
Rule between(double min, bool min_open, double max, bool max_open) {
  return bounded({min, min_open, max, max_open});
}
Rule inRange(double min, double max) { return between(min, false, max, false); }

// Caps on integers that are sizes: the code multiplies them by each other and by the bytes of a
// sample (a synthetic image is 784 floats, a layer is width x width weights, a batch of tokens is
// global_batch_size x seq_len), and an int64 that wrapped around became a negative size far from
// the key that caused it. Each cap is far beyond what a machine holds (a billion synthetic
// samples are 3 TB), and any product of two of them fits an int64 with room to spare.
constexpr double kMaxCount = 1e9;      // samples, a batch, steps of a round
constexpr double kMaxWidth = 1 << 20;  // a layer's width, classes, tokens per sample
Rule oneOf(std::vector<std::string_view> choices, std::string_view prefix = {}) {
  Rule rule;
  rule.choices = std::move(choices);
  rule.choice_prefix = prefix;
  return rule;
}
Rule formatted(FormatCheck check, std::string_view text) {
  Rule rule;
  rule.format = check;
  rule.format_text = text;
  return rule;
}
Rule required(Rule rule) {
  rule.required = true;
  return rule;
}

template <class M>
KeySpec row(M member, const FieldType<M>& default_value, Rule rule, std::string_view meaning) {
  using T = FieldType<M>;
  KeySpec key;
  key.path = member.path;
  key.type = valueTypeOf<T>();
  key.default_value = Value(std::in_place_type<Stored<T>>, stored(default_value));
  key.required = rule.required;
  key.bounds = rule.bounds;
  key.choices = std::move(rule.choices);
  key.choice_prefix = rule.choice_prefix;
  key.format = rule.format;
  key.format_text = rule.format_text;
  key.meaning = meaning;
  key.get = [](const Experiment& e) {
    return Value(std::in_place_type<Stored<T>>, stored(M::ref(e)));
  };
  key.set = [](Experiment& e, const Value& v) { load(std::get<Stored<T>>(v), M::ref(e)); };
  return key;
}

// ---------------------------------------------------------------------------------------------
// Format checks for strings that a list of choices cannot describe.

bool parseCount(std::string_view text, int64_t& out) {
  const std::optional<int64_t> count = base::parseInteger(text);
  if (count) out = *count;
  return count.has_value();
}

std::string checkRunName(const std::string& text) {
  if (text.empty()) return "it is empty";
  if (text.size() > 128) return "it is longer than 128 characters";
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return std::string("it holds '") + c + "'";
  }
  if (text[0] == '.' || text[0] == '-') return "it starts with '" + text.substr(0, 1) + "'";
  return "";
}

std::string checkNonEmpty(const std::string& text) { return text.empty() ? "it is empty" : ""; }

// Nodes times launch.nproc_per_node is the world size: both capped so that it stays an int.
constexpr int64_t kMaxNodes = 65536;
constexpr double kMaxWorkersPerNode = 4096;

std::string checkNnodes(const std::string& text) {
  size_t colon = text.find(':');
  int64_t min = 0, max = 0;
  if (colon == std::string::npos) {
    if (!parseCount(text, min)) return "N is not a whole number";
    if (min > kMaxNodes) return "N must be at most " + std::to_string(kMaxNodes);
    return min >= 1 ? "" : "N must be at least 1";
  }
  if (!parseCount(std::string_view(text).substr(0, colon), min) ||
      !parseCount(std::string_view(text).substr(colon + 1), max)) {
    return "MIN and MAX must be whole numbers";
  }
  if (min < 1) return "MIN must be at least 1";
  if (max > kMaxNodes) return "MAX must be at most " + std::to_string(kMaxNodes);
  if (min > max)
    return "MIN " + std::to_string(min) + " is greater than MAX " + std::to_string(max);
  return "";
}

std::string checkEndpoint(const std::string& text) {
  if (text.empty()) return "";
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return "it has no ':' before the port";
  if (colon == 0) return "it has no host before the ':'";
  int64_t port = 0;
  if (!parseCount(std::string_view(text).substr(colon + 1), port) || port < 1 || port > 65535) {
    return "the port after the last ':' must be in 1..65535";
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// THE TABLE. Order here is the order of toYaml, diffKeys and docs/configuration.md.
std::vector<KeySpec> buildSchema() {
  std::vector<KeySpec> t;
  // clang-format off
  t.push_back(row(TOP_KEY(name), "experiment", required(formatted(checkRunName, "a run name of letters, digits, '.', '_' and '-' (at most 128)")), "names the run in logs, checkpoints and the run directory"));

  t.push_back(row(KEY(model, name), "mlp", oneOf({"mlp", "convnet"}, "torchscript:"), "architecture; `torchscript:<file>` loads a torch.jit.save file (relative paths: from the working directory)"));
  t.push_back(row(KEY(model, hidden), {256, 128, 100}, inRange(1, kMaxWidth), "mlp: hidden layer widths, from input to output"));
  t.push_back(row(KEY(model, dropout), 0.0, between(0, false, 1, true), "mlp: dropout probability after each hidden layer"));
  t.push_back(row(KEY(model, num_classes), 10, inRange(1, kMaxWidth), "mlp, convnet: output width (classes); a TorchScript model has its own"));

  t.push_back(row(KEY(data, format), DataFormat::kIdx, oneOf(base::namesOf<DataFormat>()), "idx: `data.dataset`; npy: `inputs.npy` and `targets.npy` in `data.train` and `data.test`; tokens: 1-D .npy token-id files `data.train` and `data.test`"));
  t.push_back(row(KEY(data, train), "", anyValue(), "npy: directory of the training samples; tokens: the training token file (numpy.save of a 1-D integer array) (relative paths: from the working directory)"));
  t.push_back(row(KEY(data, test), "", anyValue(), "npy: directory of the test samples; tokens: the test token file (relative paths: from the working directory)"));
  t.push_back(row(KEY(data, seq_len), 128, inRange(1, kMaxWidth), "tokens: tokens per sample; inputs are `seq_len` consecutive tokens, targets the same shifted by one"));
  t.push_back(row(KEY(data, dataset), Dataset::kFashionMnist, oneOf(base::namesOf<Dataset>()), "idx: IDX files in `data.dir` (gzip or raw), or generated samples"));
  t.push_back(row(KEY(data, dir), "/usr/share/datasets/fashion-mnist", anyValue(), "idx: directory of the IDX files; unused for synthetic (relative paths: from the working directory)"));
  t.push_back(row(KEY(data, normalize), true, anyValue(), "idx: subtract the train-set mean and divide by its standard deviation"));
  t.push_back(row(KEY(data, shuffle), true, anyValue(), "permute the samples each epoch, from (seed, epoch)"));
  t.push_back(row(KEY(data, drop_last), true, anyValue(), "drop the last incomplete global batch of each epoch"));
  t.push_back(row(KEY(data, cache), true, anyValue(), "keep gunzipped copies of the IDX files in `<run_dir>/cache`, so a restarted worker skips the decompression"));
  t.push_back(row(KEY(data, synthetic_train_samples), 4096, inRange(1, kMaxCount), "synthetic: training samples"));
  t.push_back(row(KEY(data, synthetic_test_samples), 1024, inRange(1, kMaxCount), "synthetic: test samples"));

  t.push_back(row(KEY(loss, name), LossName::kCrossEntropy, oneOf(base::namesOf<LossName>()), "cross_entropy: logits [B, C] against class ids [B], or [B, T, V] against token ids [B, T]; mse: outputs and targets of one shape; module: the model's `forward(inputs, targets)` returns its own mean loss"));

  t.push_back(row(KEY(optimizer, name), OptimizerName::kSgd, oneOf(base::namesOf<OptimizerName>()), "optimizer"));
  t.push_back(row(KEY(optimizer, lr), 0.1, above(0), "peak learning rate (after warm-up, before decay)"));
  t.push_back(row(KEY(optimizer, momentum), 0.9, between(0, false, 1, true), "sgd: momentum; 0 turns it off"));
  t.push_back(row(KEY(optimizer, nesterov), false, anyValue(), "sgd: Nesterov momentum"));
  t.push_back(row(KEY(optimizer, weight_decay), 0.0, atLeast(0), "L2 penalty (sgd) or decoupled weight decay (adamw)"));
  t.push_back(row(KEY(optimizer, beta1), 0.9, between(0, false, 1, true), "adamw: decay rate of the first-moment estimate"));
  t.push_back(row(KEY(optimizer, beta2), 0.999, between(0, false, 1, true), "adamw: decay rate of the second-moment estimate"));
  t.push_back(row(KEY(optimizer, eps), 1e-8, above(0), "adamw: added to the denominator"));

  t.push_back(row(KEY(schedule, name), ScheduleName::kConstant, oneOf(base::namesOf<ScheduleName>()), "learning-rate schedule after warm-up"));
  t.push_back(row(KEY(schedule, warmup_steps), 0, atLeast(0), "linear warm-up from 0 to `optimizer.lr` over this many steps"));
  t.push_back(row(KEY(schedule, step_size), 1000, atLeast(1), "step: multiply the rate by `gamma` every this many steps"));
  t.push_back(row(KEY(schedule, gamma), 0.1, between(0, true, 1, false), "step: the factor"));
  t.push_back(row(KEY(schedule, min_lr), 0.0, atLeast(0), "cosine: the rate at the last step (at most `optimizer.lr`)"));

  t.push_back(row(KEY(trainer, global_batch_size), 128, inRange(1, kMaxCount), "samples per optimizer step, summed over all workers"));
  t.push_back(row(KEY(trainer, epochs), 3, atLeast(1), "passes over the training set"));
  t.push_back(row(KEY(trainer, max_steps), 0, atLeast(0), "> 0: stop after this many optimizer steps; 0: run all epochs"));
  t.push_back(row(KEY(trainer, seed), 0, anyValue(), "seeds initialization, shuffling and dropout, with (epoch, step, rank)"));
  t.push_back(row(KEY(trainer, grad_clip_norm), 0.0, atLeast(0), "> 0: clip the global gradient norm to this; 0: off"));
  t.push_back(row(KEY(trainer, grad_accumulation), 1, atLeast(1), "micro-batches per optimizer step; divides `global_batch_size`"));
  t.push_back(row(KEY(trainer, threads), 0, atLeast(0), "intra-op threads per worker, at most the cores this process may use; 0: cores / local workers"));
  t.push_back(row(KEY(trainer, precision), Precision::kFp32, oneOf(base::namesOf<Precision>()), "fp32: float32 throughout; bf16: forward and loss under LibTorch's CPU autocast in bfloat16, with float32 weights, gradients, optimizer state and checkpoints (as torch.autocast); auto: bf16 on a CPU with native bfloat16 (avx512_bf16 or AMX), fp32 otherwise. The first lines of a run say which and why. Changing it between launches needs no --allow-config-change"));
  t.push_back(row(KEY(trainer, step_timeout_seconds), 0.0, atLeast(0), "a step that makes no progress for this many seconds in one phase (data, forward, backward, sync, optimizer) stops the job with exit 2, naming the rank, step and phase (sync waits 15 s longer, so that a peer that hangs is named by its own watchdog first); evaluation and checkpoints are not timed. 0: automatic, max(300, 10 x the median duration of the latest 100 steps after the first 5 of each launch), 300 until then"));
  t.push_back(row(KEY(trainer, run_dir), "runs/default", formatted(checkNonEmpty, "a non-empty path"), "directory for logs, config.yaml and, by default, checkpoints (relative paths: from the working directory)"));
  t.push_back(row(KEY(trainer, log_every_steps), 50, atLeast(1), "log loss and throughput every this many steps"));
  t.push_back(row(KEY(trainer, log_all_ranks), false, anyValue(), "print progress, evaluations and the summary from every worker; false: rank 0 alone (every rank still prints its warnings)"));
  t.push_back(row(KEY(trainer, balance), BalanceMode::kOff, oneOf(base::namesOf<BalanceMode>()), "ranks' shares of the global batch: off: equal; auto: in proportion to each rank's measured compute rate, so a slow worker takes fewer samples (the same global batch, the same math; which rank takes which sample then depends on timing, so bit-identical reruns need off or fixed); fixed: `balance_shares`"));
  t.push_back(row(KEY(trainer, balance_every_steps), 20, atLeast(1), "auto: the ranks compare their rates and may move the shares every this many steps"));
  t.push_back(row(KEY(trainer, balance_shares), std::vector<int64_t>{}, atLeast(0), "fixed: samples per rank, one per worker, summing to `global_batch_size`"));
  t.push_back(row(KEY(trainer, sync), SyncMode::kEveryStep, oneOf(base::namesOf<SyncMode>()), "every_step: the gradients are all-reduced every step (`comm`); diloco: each worker trains its own replica for `diloco.inner_steps` steps without communicating, then the workers average how far they moved and an outer optimizer steps the shared parameters (DiLoCo; `diloco`). For fleets on slow or distant links"));

  t.push_back(row(KEY(eval, every_steps), 0, atLeast(0), "evaluate every this many steps; 0: at the end of each epoch only"));
  t.push_back(row(KEY(eval, batch_size), 1000, inRange(1, kMaxCount), "evaluation batch size per worker"));

  t.push_back(row(KEY(checkpoint, dir), "", anyValue(), "checkpoint directory; empty: `<run_dir>/checkpoints` (relative paths: from the working directory)"));
  t.push_back(row(KEY(checkpoint, every_steps), 0, atLeast(0), "checkpoint every this many steps; 0: off"));
  t.push_back(row(KEY(checkpoint, every_seconds), 0.0, atLeast(0), "checkpoint when this many seconds have passed since the last; 0: off"));
  t.push_back(row(KEY(checkpoint, keep), 3, atLeast(1), "how many of the newest checkpoints to keep"));
  t.push_back(row(KEY(checkpoint, async), true, anyValue(), "write checkpoints on a background thread while training goes on"));
  t.push_back(row(KEY(checkpoint, max_failures), 3, atLeast(1), "stop the run (exit 1; 2 when the disk is full or read-only) when this many checkpoints in a row fail to save; each failure is reported, and the newest valid checkpoint stays"));

  t.push_back(row(KEY(comm, algorithm), Algorithm::kAuto, oneOf(base::namesOf<Algorithm>()), "gradient all-reduce; hierarchical: ring inside each host, ring across hosts (for several ranks per host); auto: the cost model's pick per bucket and host layout"));
  t.push_back(row(KEY(comm, bucket_cap_mb), kDefaultBucketCapMb, above(0), "gradient bucket size cap, MiB"));
  t.push_back(row(KEY(comm, first_bucket_mb), kDefaultFirstBucketMb, above(0), "size cap of the first bucket, MiB (at most `bucket_cap_mb`)"));
  t.push_back(row(KEY(comm, timeout_seconds), kDefaultTimeoutSeconds, above(0), "a collective not done by then fails, naming the peer"));
  t.push_back(row(KEY(comm, cost_model), "", anyValue(), "calibration file from `cumulus-bench calibrate`; empty: built-in (relative paths: from the working directory)"));
  t.push_back(row(KEY(comm, compression), Compression::kNone, oneOf({base::nameOf(Compression::kNone), base::nameOf(Compression::kBf16)}), "gradient buckets on the wire: none sends float32; bf16 sends bfloat16 (half the bytes), each rank keeping its rounding error and adding it to the next step's gradient (error feedback). For slow links (1 Gbit/s and below), where the all-reduce dominates the step"));

  t.push_back(row(KEY(diloco, inner_steps), 50, inRange(1, kMaxCount), "inner steps each worker takes alone between two syncs of a fragment (H)"));
  t.push_back(row(KEY(diloco, outer_lr), 0.7, between(0, true, 10, false), "the outer optimizer's learning rate (SGD on the averaged outer gradients): 1 without momentum moves the global parameters to the replicas' average, more steps past it; the papers use 0.7, and far above 1 the outer steps diverge"));
  t.push_back(row(KEY(diloco, outer_momentum), 0.9, between(0, false, 1, true), "the outer optimizer's momentum"));
  t.push_back(row(KEY(diloco, nesterov), true, anyValue(), "Nesterov momentum for the outer optimizer (needs `outer_momentum` above 0)"));
  t.push_back(row(KEY(diloco, fragments), 1, atLeast(1), "1: DiLoCo, every parameter synced every `inner_steps`; more: Streaming DiLoCo, the parameters split into this many fragments of whole tensors, each synced at its own offset within the `inner_steps`, so the peak traffic is a fragment's (at most `inner_steps` and the model's tensor count)"));
  t.push_back(row(KEY(diloco, overlap), false, anyValue(), "a fragment's outer all-reduce runs during the next step's forward and backward, whose gradient is applied after the fragment's update (one step late)"));
  t.push_back(row(KEY(diloco, mix), 0.0, between(0, false, 1, true), "at a fragment's update, the share of its own values a worker keeps (local = mix x local + (1 - mix) x global); 0: every worker takes the global values"));
  t.push_back(row(KEY(diloco, outer_compression), Compression::kNone, oneOf(base::namesOf<Compression>()), "outer gradients on the wire: none sends float32; bf16 bfloat16 (half); int8 one byte per value with a float32 scale per 256 (a quarter, gathered rather than reduced: every worker receives every worker's). bf16 and int8 keep each worker's rounding error for its next round (error feedback)"));

  t.push_back(row(KEY(launch, nproc_per_node), 2, inRange(1, kMaxWorkersPerNode), "workers per node"));
  t.push_back(row(KEY(launch, nnodes), "1", formatted(checkNnodes, "N or MIN:MAX, with 1 <= MIN <= MAX <= 65536"), "nodes: a fixed count, or an elastic range"));
  t.push_back(row(KEY(launch, max_restarts), 3, atLeast(0), "group restarts after a crash (preemptions do not count)"));
  t.push_back(row(KEY(launch, monitor_interval), 0.1, above(0), "seconds between worker health checks"));
  t.push_back(row(KEY(launch, rdzv_endpoint), "", formatted(checkEndpoint, "empty or host:port"), "rendezvous host:port; empty with one node: standalone"));
  t.push_back(row(KEY(launch, rdzv_timeout), 60.0, atLeast(0.1), "seconds to wait for the Store and the other nodes (`--rdzv-timeout`)"));
  t.push_back(row(KEY(launch, rdzv_last_call), 3.0, atLeast(0), "elastic: close the rendezvous this many seconds after the last node joined, once MIN are in (`--rdzv-last-call`)"));
  t.push_back(row(KEY(launch, recovery), base::nameOf(kDefaultRecovery), oneOf(base::namesOf<Recovery>()), "after a failure: restart the whole group from the newest checkpoint, or let the survivors go on in place and start replacements that join them (`--recovery`; comm.algorithm funnel always restarts)"));
  t.push_back(row(KEY(launch, min_workers), 0, atLeast(0), "recovery in place: the fewest workers the group trains on with; workers that get a notice of their own leave while this many remain, the others train on (`--min-workers`); 0: every worker of the `nnodes` MIN nodes"));
  t.push_back(row(KEY(launch, metrics_port), 0, between(0, false, 65535, false), "node 0 serves the job's Prometheus `/metrics` and live dashboard on this port (loopback unless `--metrics-host`; `--metrics-port`); 0: off"));
  // clang-format on
  return t;
}

}  // namespace

std::string_view KeySpec::section() const {
  size_t dot = path.find('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::string_view KeySpec::leaf() const {
  size_t dot = path.find('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> table = buildSchema();
  return table;
}

const std::vector<std::string_view>& sectionNames() {
  static const std::vector<std::string_view> sections = {
      "model", "data",       "loss", "optimizer", "schedule", "trainer",
      "eval",  "checkpoint", "comm", "diloco",    "launch"};
  return sections;
}

std::string_view sectionMeaning(std::string_view section) {
  if (section == "model") return "the network";
  if (section == "data") return "the dataset and how it is fed";
  if (section == "loss") return "what training minimizes";
  if (section == "optimizer") return "the optimizer";
  if (section == "schedule") return "the learning-rate schedule";
  if (section == "trainer") return "the training loop";
  if (section == "eval") return "evaluation on the test set";
  if (section == "checkpoint") return "checkpoints";
  if (section == "comm") return "gradient synchronization";
  if (section == "diloco") return "low-communication training (trainer.sync: diloco)";
  if (section == "launch") return "the launcher, cumulus-run";
  return "";
}

const KeySpec* findKey(std::string_view path) {
  for (const KeySpec& key : schema()) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

Experiment schemaDefaults() {
  Experiment experiment;
  for (const KeySpec& key : schema()) key.set(experiment, key.default_value);
  return experiment;
}

std::string_view typeName(ValueType type) {
  switch (type) {
    case ValueType::kString:
      return "string";
    case ValueType::kInt:
      return "integer";
    case ValueType::kUInt:
      return "integer";
    case ValueType::kDouble:
      return "number";
    case ValueType::kBool:
      return "bool";
    case ValueType::kIntList:
      return "list of integers";
  }
  return "";
}

namespace {

// A bound as people write it: a whole number in full ("1000000000", not "1.0e+09"), others as
// formatNumber does.
std::string boundText(double bound) {
  if (std::floor(bound) == bound && std::fabs(bound) < 9007199254740992.0) {  // 2^53: exact
    return std::to_string(static_cast<int64_t>(bound));
  }
  return formatNumber(bound);
}

}  // namespace

std::string boundsText(const Bounds& b) {
  bool has_min = std::isfinite(b.min), has_max = std::isfinite(b.max);
  if (has_min && has_max) {
    return std::string("in ") + (b.min_open ? "(" : "[") + boundText(b.min) + ", " +
           boundText(b.max) + (b.max_open ? ")" : "]");
  }
  if (has_min) return (b.min_open ? "> " : ">= ") + boundText(b.min);
  if (has_max) return (b.max_open ? "< " : "<= ") + boundText(b.max);
  return "";
}

namespace {

bool inBounds(const Bounds& b, double v) {
  if (b.min_open ? !(v > b.min) : !(v >= b.min)) return false;
  if (b.max_open ? !(v < b.max) : !(v <= b.max)) return false;
  return true;
}

std::string choicesText(const KeySpec& key) {
  std::string text;
  for (size_t i = 0; i < key.choices.size(); ++i)
    text += (i > 0 ? ", " : "") + std::string(key.choices[i]);
  if (!key.choice_prefix.empty()) text += ", " + std::string(key.choice_prefix) + "<path>";
  return text;
}

}  // namespace

std::string allowedText(const KeySpec& key) {
  switch (key.type) {
    case ValueType::kString:
      if (!key.choices.empty()) return choicesText(key);
      return std::string(key.format_text);
    case ValueType::kInt:
    case ValueType::kDouble:
      return boundsText(key.bounds);
    case ValueType::kIntList: {
      std::string bounds = boundsText(key.bounds);
      return bounds.empty() ? "" : "each " + bounds;
    }
    case ValueType::kUInt:
    case ValueType::kBool:
      return "";
  }
  return "";
}

std::string expectedPhrase(const KeySpec& key) {
  std::string bounds = boundsText(key.bounds);
  switch (key.type) {
    case ValueType::kString:
      if (!key.choices.empty()) return "one of " + choicesText(key);
      if (!key.format_text.empty()) return std::string(key.format_text);
      return "a string";
    case ValueType::kInt:
      return bounds.empty() ? "an integer" : "an integer " + bounds;
    case ValueType::kUInt:
      return "a non-negative integer";
    case ValueType::kDouble:
      return bounds.empty() ? "a number" : "a number " + bounds;
    case ValueType::kBool:
      return "true or false";
    case ValueType::kIntList:
      return bounds.empty() ? "a list of integers" : "a list of integers " + bounds;
  }
  return "";
}

std::string checkValue(const KeySpec& key, const Value& value) {
  auto expected = [&](const std::string& got) {
    return "expected " + expectedPhrase(key) + ", got " + got;
  };
  switch (key.type) {
    case ValueType::kInt: {
      int64_t v = std::get<int64_t>(value);
      return inBounds(key.bounds, static_cast<double>(v)) ? "" : expected(std::to_string(v));
    }
    case ValueType::kDouble: {
      double v = std::get<double>(value);
      return inBounds(key.bounds, v) ? "" : expected(formatNumber(v));
    }
    case ValueType::kIntList: {
      const auto& list = std::get<std::vector<int64_t>>(value);
      for (int64_t v : list) {
        if (!inBounds(key.bounds, static_cast<double>(v))) return expected(formatValue(value));
      }
      return "";
    }
    case ValueType::kString: {
      const std::string& text = std::get<std::string>(value);
      std::string quoted = quoteForMessage(text);
      if (!key.choices.empty()) {
        for (std::string_view choice : key.choices) {
          if (text == choice) return "";
        }
        std::string_view prefix = key.choice_prefix;
        if (!prefix.empty() && text.compare(0, prefix.size(), prefix) == 0) {
          if (text.size() > prefix.size()) return "";
          return expected(quoted) + "; name the file after the colon, e.g. " + std::string(prefix) +
                 "model.pt";
        }
        std::vector<std::string> options(key.choices.begin(), key.choices.end());
        std::string guess = closestSpelling(text, options);
        return expected(quoted) + (guess.empty() ? "" : "; did you mean `" + guess + "`?");
      }
      if (key.format) {
        std::string why = key.format(text);
        if (!why.empty()) return expected(quoted) + " (" + why + ")";
      }
      return "";
    }
    case ValueType::kUInt:
    case ValueType::kBool:
      return "";
  }
  return "";
}

}  // namespace cumulus::configs
