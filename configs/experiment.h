#pragma once
// The experiment schema as plain structs. An experiment YAML file is parsed once into an
// `Experiment` (see configs/parse.h); nothing downstream reads YAML. Defaults live in the schema
// table in configs/schema.cc, which is also the source of the reference table in
// docs/configuration.md; the initializers below must match it (a test checks that they do).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "base/enum_names.h"
#include "cumulus/options.h"  // Algorithm, Compression, Precision, Recovery

namespace cumulus::configs {

struct ModelConfig {
  // "mlp", "convnet", or "torchscript:<path to a torch.jit.save file>".
  std::string name = "mlp";
  std::vector<int64_t> hidden = {256, 128, 100};  // mlp hidden widths
  double dropout = 0.0;                           // mlp: after each hidden layer; convnet: 0.4
  int64_t num_classes = 10;  // mlp, convnet: the output width (a TorchScript model has its own)
};

// The keys whose value is one of a few names are typed here, where they are read: the YAML name
// becomes one of these enums once (configs/schema.cc), and everything downstream switches on the
// enum. Each has its table of names (base/enum_names.h), in the order the reference
// (docs/configuration.md) and the errors list them; the schema's allowed values are these tables.
enum class DataFormat { kIdx, kNpy, kTokens };
enum class Dataset { kFashionMnist, kMnist, kSynthetic };
enum class LossName { kCrossEntropy, kMse, kModule };
enum class OptimizerName { kSgd, kAdamw };
enum class ScheduleName { kConstant, kStep, kCosine };
enum class BalanceMode { kOff, kAuto, kFixed };
enum class SyncMode { kEveryStep, kDiloco };

inline constexpr std::pair<DataFormat, const char*> kDataFormatNames[] = {
    {DataFormat::kIdx, "idx"}, {DataFormat::kNpy, "npy"}, {DataFormat::kTokens, "tokens"}};
inline constexpr std::pair<Dataset, const char*> kDatasetNames[] = {
    {Dataset::kFashionMnist, "fashion-mnist"},
    {Dataset::kMnist, "mnist"},
    {Dataset::kSynthetic, "synthetic"}};
inline constexpr std::pair<LossName, const char*> kLossNames[] = {
    {LossName::kCrossEntropy, "cross_entropy"},
    {LossName::kMse, "mse"},
    {LossName::kModule, "module"}};
inline constexpr std::pair<OptimizerName, const char*> kOptimizerNames[] = {
    {OptimizerName::kSgd, "sgd"}, {OptimizerName::kAdamw, "adamw"}};
inline constexpr std::pair<ScheduleName, const char*> kScheduleNames[] = {
    {ScheduleName::kConstant, "constant"},
    {ScheduleName::kStep, "step"},
    {ScheduleName::kCosine, "cosine"}};
inline constexpr std::pair<BalanceMode, const char*> kBalanceNames[] = {
    {BalanceMode::kOff, "off"}, {BalanceMode::kAuto, "auto"}, {BalanceMode::kFixed, "fixed"}};
inline constexpr std::pair<SyncMode, const char*> kSyncNames[] = {
    {SyncMode::kEveryStep, "every_step"}, {SyncMode::kDiloco, "diloco"}};
constexpr const auto& enumNames(DataFormat) { return kDataFormatNames; }
constexpr const auto& enumNames(Dataset) { return kDatasetNames; }
constexpr const auto& enumNames(LossName) { return kLossNames; }
constexpr const auto& enumNames(OptimizerName) { return kOptimizerNames; }
constexpr const auto& enumNames(ScheduleName) { return kScheduleNames; }
constexpr const auto& enumNames(BalanceMode) { return kBalanceNames; }
constexpr const auto& enumNames(SyncMode) { return kSyncNames; }

struct DataConfig {
  // "idx": `dataset` (IDX files in `dir`, or synthetic); "npy": `train` and `test` are directories
  // with inputs.npy and targets.npy; "tokens": `train` and `test` are 1-D .npy token streams.
  DataFormat format = DataFormat::kIdx;
  std::string train = "";  // npy, tokens: the training data
  std::string test = "";   // npy, tokens: the test data
  int64_t seq_len = 128;   // tokens: tokens per sample (inputs [T], targets shifted by one)
  // idx: "fashion-mnist", "mnist" (IDX files in `dir`, gzip or raw) or "synthetic".
  Dataset dataset = Dataset::kFashionMnist;
  std::string dir = "/usr/share/datasets/fashion-mnist";
  bool normalize = true;  // subtract the train-set mean, divide by its std
  bool shuffle = true;    // permute each epoch with (seed, epoch)
  bool drop_last = true;  // drop the last incomplete global batch of an epoch
  bool cache = true;      // keep gunzipped IDX files in <run_dir>/cache for fast restarts
  int64_t synthetic_train_samples = 4096;
  int64_t synthetic_test_samples = 1024;
};

struct LossConfig {
  // "cross_entropy" (logits [B, C] vs class ids [B], or [B, T, V] vs token ids [B, T]), "mse"
  // (outputs and targets of one shape), "module" (the model's forward(inputs, targets) returns
  // its mean loss).
  LossName name = LossName::kCrossEntropy;
};

struct OptimizerConfig {
  OptimizerName name = OptimizerName::kSgd;
  double lr = 0.1;
  double momentum = 0.9;  // sgd
  bool nesterov = false;  // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9;    // adamw
  double beta2 = 0.999;  // adamw
  double eps = 1e-8;     // adamw
};

struct ScheduleConfig {
  ScheduleName name = ScheduleName::kConstant;
  int64_t warmup_steps = 0;  // linear warm-up from 0 to lr, composed with any schedule
  int64_t step_size = 1000;  // step: multiply by gamma every step_size steps
  double gamma = 0.1;        // step
  double min_lr = 0.0;       // cosine: the floor at the last step
};

struct TrainerConfig {
  int64_t global_batch_size = 128;  // samples per optimizer step, summed over all workers
  int64_t epochs = 3;
  int64_t max_steps = 0;  // > 0: stop after this many optimizer steps
  uint64_t seed = 0;
  double grad_clip_norm = 0.0;    // > 0: clip the global gradient norm
  int64_t grad_accumulation = 1;  // micro-batches per optimizer step
  int64_t threads = 0;            // intra-op threads; 0 = cores / local workers
  // fp32, bf16 (forward and loss under bf16 autocast, float32 weights and optimizer) or auto
  // (bf16 where the CPU has it natively) (<cumulus/precision.h>).
  Precision precision = Precision::kFp32;
  // A step phase with no progress for this long ends the job (exit 2); 0: automatic,
  // max(300 s, 10 x the median step) (<cumulus/step_watchdog.h>).
  double step_timeout_seconds = 0.0;
  std::string run_dir = "runs/default";
  int64_t log_every_steps = 50;
  bool log_all_ranks = false;  // progress and summaries from every worker, not rank 0 alone
  // Ranks' shares of the global batch (distributed/balance.h): "off" (equal), "auto" (in proportion
  // to each rank's measured compute rate, agreed every balance_every_steps steps) or "fixed"
  // (balance_shares, one count per rank).
  BalanceMode balance = BalanceMode::kOff;
  int64_t balance_every_steps = 20;
  std::vector<int64_t> balance_shares = {};
  // every_step: the gradients are all-reduced every step (comm.*); diloco: each worker takes
  // diloco.inner_steps steps alone between outer syncs (the diloco section, <cumulus/diloco.h>).
  SyncMode sync = SyncMode::kEveryStep;
};

// trainer.sync: diloco (<cumulus/diloco.h>, docs/diloco.md).
struct DilocoConfig {
  int64_t inner_steps = 50;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool nesterov = true;
  int64_t fragments = 1;
  bool overlap = false;
  double mix = 0.0;
  Compression outer_compression = Compression::kNone;
};

struct EvalConfig {
  int64_t every_steps = 0;  // 0: only at the end of each epoch
  int64_t batch_size = 1000;
};

struct CheckpointConfig {
  std::string dir = "";        // empty: <run_dir>/checkpoints
  int64_t every_steps = 0;     // 0: off
  double every_seconds = 0.0;  // 0: off
  int64_t keep = 3;
  bool async = true;
  int64_t max_failures = 3;  // failed saves in a row that stop the run
};

struct CommConfig {
  Algorithm algorithm = Algorithm::kAuto;  // read from its name (<cumulus/options.h>)
  double bucket_cap_mb = kDefaultBucketCapMb;
  double first_bucket_mb = kDefaultFirstBucketMb;
  double timeout_seconds = kDefaultTimeoutSeconds;
  std::string cost_model = "";  // calibration file from `cumulus-bench calibrate`; empty: built-in
  Compression compression = Compression::kNone;  // bf16: with error feedback
};

struct LaunchConfig {
  int64_t nproc_per_node = 2;
  std::string nnodes = "1";  // "N" or "MIN:MAX"
  int64_t max_restarts = 3;
  double monitor_interval = 0.1;   // seconds
  std::string rdzv_endpoint = "";  // host:port; empty with nnodes 1: standalone
  double rdzv_timeout = 60.0;      // seconds to wait for the Store and the other nodes
  double rdzv_last_call = 3.0;     // elastic: seconds after the last joiner before closing
  // A name of cumulus::Recovery (<cumulus/options.h>): "in_place" or "restart".
  std::string recovery = base::nameOf(kDefaultRecovery);
  int64_t metrics_port = 0;  // node 0 serves /metrics and the dashboard there; 0: off
  int64_t min_workers = 0;   // in place: the fewest workers to train on; 0: MIN nodes' workers
};

struct Experiment {
  std::string name = "experiment";
  ModelConfig model;
  DataConfig data;
  LossConfig loss;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainerConfig trainer;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  CommConfig comm;
  DilocoConfig diloco;
  LaunchConfig launch;
};

// Field-by-field equality. tests/configs/schema_test.cc checks that every struct has exactly as
// many fields as the schema table has keys for it, and that each key is seen by these operators, so
// a field added here without a table entry (or without a line below) fails the tests.
inline auto tieFields(const ModelConfig& c) {
  return std::tie(c.name, c.hidden, c.dropout, c.num_classes);
}
inline auto tieFields(const DataConfig& c) {
  return std::tie(c.format, c.train, c.test, c.seq_len, c.dataset, c.dir, c.normalize, c.shuffle,
                  c.drop_last, c.cache, c.synthetic_train_samples, c.synthetic_test_samples);
}
inline auto tieFields(const LossConfig& c) { return std::tie(c.name); }
inline auto tieFields(const OptimizerConfig& c) {
  return std::tie(c.name, c.lr, c.momentum, c.nesterov, c.weight_decay, c.beta1, c.beta2, c.eps);
}
inline auto tieFields(const ScheduleConfig& c) {
  return std::tie(c.name, c.warmup_steps, c.step_size, c.gamma, c.min_lr);
}
inline auto tieFields(const TrainerConfig& c) {
  return std::tie(c.global_batch_size, c.epochs, c.max_steps, c.seed, c.grad_clip_norm,
                  c.grad_accumulation, c.threads, c.precision, c.step_timeout_seconds, c.run_dir,
                  c.log_every_steps, c.log_all_ranks, c.balance, c.balance_every_steps,
                  c.balance_shares, c.sync);
}
inline auto tieFields(const EvalConfig& c) { return std::tie(c.every_steps, c.batch_size); }
inline auto tieFields(const CheckpointConfig& c) {
  return std::tie(c.dir, c.every_steps, c.every_seconds, c.keep, c.async, c.max_failures);
}
inline auto tieFields(const CommConfig& c) {
  return std::tie(c.algorithm, c.bucket_cap_mb, c.first_bucket_mb, c.timeout_seconds, c.cost_model,
                  c.compression);
}
inline auto tieFields(const DilocoConfig& c) {
  return std::tie(c.inner_steps, c.outer_lr, c.outer_momentum, c.nesterov, c.fragments, c.overlap,
                  c.mix, c.outer_compression);
}
inline auto tieFields(const LaunchConfig& c) {
  return std::tie(c.nproc_per_node, c.nnodes, c.max_restarts, c.monitor_interval, c.rdzv_endpoint,
                  c.rdzv_timeout, c.rdzv_last_call, c.recovery, c.metrics_port, c.min_workers);
}
inline auto tieFields(const Experiment& c) {
  return std::tie(c.name, c.model, c.data, c.loss, c.optimizer, c.schedule, c.trainer, c.eval,
                  c.checkpoint, c.comm, c.diloco, c.launch);
}

#define CUMULUS_CONFIGS_EQUALITY(T)                                                       \
  inline bool operator==(const T& a, const T& b) { return tieFields(a) == tieFields(b); } \
  inline bool operator!=(const T& a, const T& b) { return !(a == b); }
CUMULUS_CONFIGS_EQUALITY(ModelConfig)
CUMULUS_CONFIGS_EQUALITY(DataConfig)
CUMULUS_CONFIGS_EQUALITY(LossConfig)
CUMULUS_CONFIGS_EQUALITY(OptimizerConfig)
CUMULUS_CONFIGS_EQUALITY(ScheduleConfig)
CUMULUS_CONFIGS_EQUALITY(TrainerConfig)
CUMULUS_CONFIGS_EQUALITY(EvalConfig)
CUMULUS_CONFIGS_EQUALITY(CheckpointConfig)
CUMULUS_CONFIGS_EQUALITY(CommConfig)
CUMULUS_CONFIGS_EQUALITY(DilocoConfig)
CUMULUS_CONFIGS_EQUALITY(LaunchConfig)
CUMULUS_CONFIGS_EQUALITY(Experiment)
#undef CUMULUS_CONFIGS_EQUALITY

}  // namespace cumulus::configs
