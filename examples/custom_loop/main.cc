// custom_loop: a training loop of the user's own on Cumulus's public API, the kind cumulus-train
// cannot run from a YAML file: an autoencoder on Fashion-MNIST (784 -> hidden -> code -> hidden ->
// 784, a reconstruction loss), torch::optim::Adam with a schedule written here (linear warm-up,
// then a cosine), data-parallel over the ranks cumulus-run starts, checkpointed every N steps,
// stopping at a step all ranks agree on when preempted (exit 75), and resuming bit-exactly.
//
//   cumulus-run --standalone --nproc-per-node 2 -- custom_loop --data DIR --run-dir DIR
//
// See README.md for the flags and what it prints.
#include <cumulus/cumulus.h>
#include <torch/torch.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int64_t kPixels = 28 * 28;

struct Flags {
  std::string data;       // the uncompressed Fashion-MNIST training files
  std::string run_dir;    // checkpoints/ and the final parameters
  std::string out;        // the final parameters; default <run-dir>/final_parameters.bin
  std::optional<cumulus::Algorithm> algorithm;  // the gradient all-reduce; unset: the group's
  cumulus::Precision precision = cumulus::Precision::kFp32;  // of the forward pass
  int64_t steps = 1500;
  int64_t batch = 128;  // global: the ranks split it
  int64_t hidden = 256;
  int64_t code = 32;
  int64_t warmup = 100;
  int64_t checkpoint_every = 100;
  int64_t log_every = 50;
  int64_t limit = 0;  // use the first `limit` images; 0: all 60000
  int64_t seed = 1;
  double lr = 2e-3;
};

const char* kUsage = R"(usage: custom_loop --data DIR --run-dir DIR [flags]

  --data DIR              the uncompressed Fashion-MNIST training files (train-images-idx3-ubyte,
                          train-labels-idx1-ubyte): gunzip /usr/share/datasets/fashion-mnist/train-*.gz
  --run-dir DIR           checkpoints (DIR/checkpoints) and the final parameters; a relaunch with
                          the same DIR resumes from the newest valid checkpoint
  --out FILE              the final parameters' raw bytes (default DIR/final_parameters.bin)
  --steps N               optimizer steps (1500)
  --batch N               global batch, split over the ranks (128)
  --hidden N, --code N    layer widths: 784 -> hidden -> code -> hidden -> 784 (256, 32)
  --lr X                  peak learning rate (0.002)
  --warmup N              linear warm-up steps, then a cosine down to lr/10 (100)
  --checkpoint-every N    steps between checkpoints (100)
  --log-every N           steps between progress lines (50)
  --limit N               train on the first N images only (0: all)
  --seed N                initialization and shuffling (1)
  --algorithm NAME        gradient all-reduce: funnel, tree, ring, hierarchical, auto
                          (default: the group's)
  --precision NAME        forward pass: fp32, bf16 (bfloat16 autocast, float32 weights) or auto
                          (bf16 where the CPU has it natively) (fp32)

Exit status: 0 done, 2 a bad flag or missing data, 75 preempted after a checkpoint (relaunch to
resume), 1 any other failure.
)";

// A flag's value as a number, or a UserError naming the flag.
int64_t positive(const std::string& flag, const std::string& value, int64_t min = 1) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || n < min) {
    throw cumulus::UserError(flag + ": expected an integer >= " + std::to_string(min) + ", got '" +
                             value + "'");
  }
  return n;
}

// The name typed once, here at the edge: everything below takes cumulus::Algorithm.
cumulus::Algorithm algorithm(const std::string& flag, const std::string& value) {
  try {
    return cumulus::parseAlgorithm(value);
  } catch (const cumulus::UserError& e) {
    throw cumulus::UserError(flag + ": " + e.what());
  }
}

cumulus::Precision precision(const std::string& flag, const std::string& value) {
  try {
    return cumulus::parsePrecision(value);
  } catch (const cumulus::UserError& e) {
    throw cumulus::UserError(flag + ": " + e.what());
  }
}

double positiveReal(const std::string& flag, const std::string& value) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !(x > 0)) {
    throw cumulus::UserError(flag + ": expected a number > 0, got '" + value + "'");
  }
  return x;
}

using Setter = std::function<void(Flags&, const std::string& flag, const std::string& value)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"--data", [](Flags& f, auto&, auto& v) { f.data = v; }},
      {"--run-dir", [](Flags& f, auto&, auto& v) { f.run_dir = v; }},
      {"--out", [](Flags& f, auto&, auto& v) { f.out = v; }},
      {"--algorithm", [](Flags& f, auto& k, auto& v) { f.algorithm = algorithm(k, v); }},
      {"--precision", [](Flags& f, auto& k, auto& v) { f.precision = precision(k, v); }},
      {"--steps", [](Flags& f, auto& k, auto& v) { f.steps = positive(k, v); }},
      {"--batch", [](Flags& f, auto& k, auto& v) { f.batch = positive(k, v); }},
      {"--hidden", [](Flags& f, auto& k, auto& v) { f.hidden = positive(k, v); }},
      {"--code", [](Flags& f, auto& k, auto& v) { f.code = positive(k, v); }},
      {"--warmup", [](Flags& f, auto& k, auto& v) { f.warmup = positive(k, v, 0); }},
      {"--checkpoint-every",
       [](Flags& f, auto& k, auto& v) { f.checkpoint_every = positive(k, v); }},
      {"--log-every", [](Flags& f, auto& k, auto& v) { f.log_every = positive(k, v); }},
      {"--limit", [](Flags& f, auto& k, auto& v) { f.limit = positive(k, v, 0); }},
      {"--seed", [](Flags& f, auto& k, auto& v) { f.seed = positive(k, v, 0); }},
      {"--lr", [](Flags& f, auto& k, auto& v) { f.lr = positiveReal(k, v); }},
  };
  return table;
}

// --flag VALUE or --flag=VALUE; none: --help was asked for.
std::optional<Flags> parseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return std::nullopt;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const auto setter = setters().find(name);
    if (setter == setters().end()) {
      throw cumulus::UserError(
          (arg.rfind("--", 0) == 0 ? "unknown flag " + name : "unexpected argument '" + arg + "'") +
          "; see custom_loop --help");
    }
    if (eq == std::string::npos && i + 1 == argc) {
      throw cumulus::UserError(name + " needs a value; see custom_loop --help");
    }
    setter->second(flags, name, eq == std::string::npos ? argv[++i] : arg.substr(eq + 1));
  }
  if (flags.data.empty() || flags.run_dir.empty()) {
    throw cumulus::UserError(std::string(flags.data.empty() ? "--data" : "--run-dir") +
                             " is required; see custom_loop --help");
  }
  if (flags.warmup >= flags.steps) {
    throw cumulus::UserError("--warmup " + std::to_string(flags.warmup) +
                             " must be less than --steps " + std::to_string(flags.steps));
  }
  if (flags.out.empty()) flags.out = flags.run_dir + "/final_parameters.bin";
  return flags;
}

// What a checkpoint must have been written with to be resumed by this run, one "key: value" line
// each (CheckpointState::config_yaml). The world size may differ: the sampler re-shards.
std::string describe(const Flags& f) {
  std::ostringstream out;
  out << "hidden: " << f.hidden << "\ncode: " << f.code << "\nbatch: " << f.batch
      << "\nsteps: " << f.steps << "\nwarmup: " << f.warmup << "\nlr: " << f.lr
      << "\nlimit: " << f.limit << "\nseed: " << f.seed << "\n";
  return out.str();
}

// The training images as rows of 784 floats in [0, 1].
torch::Tensor loadImages(const Flags& flags) {
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
    const std::string path = flags.data + "/" + name;
    if (!std::filesystem::is_regular_file(path)) {
      throw cumulus::UserError(path +
                               " not found: --data must name a directory holding the "
                               "uncompressed Fashion-MNIST training files (gunzip "
                               "/usr/share/datasets/fashion-mnist/train-*.gz into it)");
    }
  }
  torch::data::datasets::MNIST mnist(flags.data, torch::data::datasets::MNIST::Mode::kTrain);
  torch::Tensor images = mnist.images().reshape({-1, kPixels});
  if (flags.limit > images.size(0)) {
    throw cumulus::UserError("--limit " + std::to_string(flags.limit) + ": the training set has " +
                             std::to_string(images.size(0)) + " images");
  }
  if (flags.limit > 0) images = images.narrow(0, 0, flags.limit);
  return images.contiguous();
}

struct AutoencoderImpl : torch::nn::Module {
  AutoencoderImpl(int64_t hidden, int64_t code) {
    using namespace torch::nn;
    encoder = register_module("encoder",
                              Sequential(Linear(kPixels, hidden), ReLU(), Linear(hidden, code)));
    decoder = register_module(
        "decoder", Sequential(Linear(code, hidden), ReLU(), Linear(hidden, kPixels), Sigmoid()));
  }
  torch::Tensor forward(const torch::Tensor& x) { return decoder->forward(encoder->forward(x)); }
  torch::nn::Sequential encoder{nullptr};
  torch::nn::Sequential decoder{nullptr};
};
TORCH_MODULE(Autoencoder);

// Every rank draws the same initial parameters (and DataParallel::attach makes sure of it). The
// loop itself draws nothing from torch's generator: a checkpoint keeps one rank's generator state,
// so randomness in a step should come from a generator seeded with (seed, step, rank).
Autoencoder seededAutoencoder(const Flags& flags) {
  torch::manual_seed(static_cast<uint64_t>(flags.seed));
  return Autoencoder(flags.hidden, flags.code);
}

// The schedule of this example: linear warm-up to the peak, then a cosine from the peak down to
// peak/10 at the last step. A function of the step alone, so a resumed run follows it exactly.
double learningRate(const Flags& flags, int64_t step) {
  if (step < flags.warmup) return flags.lr * static_cast<double>(step + 1) / flags.warmup;
  const double progress =
      static_cast<double>(step - flags.warmup) / static_cast<double>(flags.steps - flags.warmup);
  const double floor = flags.lr / 10;
  const double pi = std::acos(-1.0);
  return floor + 0.5 * (flags.lr - floor) * (1 + std::cos(pi * progress));
}

struct Job {
  Job(const Flags& f, cumulus::ProcessGroup& g)
      : flags(f),
        group(g),
        images(loadImages(f)),
        net(seededAutoencoder(f)),
        optimizer(net->parameters(), torch::optim::AdamOptions(f.lr)),
        sampler(images.size(0), f.batch, static_cast<uint64_t>(f.seed), /*shuffle=*/true,
                /*drop_last=*/true),
        checkpoints(f.run_dir + "/checkpoints", /*keep=*/2),
        precision(cumulus::choosePrecision(f.precision).precision) {}

  bool leader() const { return group.rank() == 0; }

  const Flags& flags;
  cumulus::ProcessGroup& group;
  torch::Tensor images;
  Autoencoder net;
  torch::optim::Adam optimizer;
  cumulus::DistributedSampler sampler;
  cumulus::Checkpoints checkpoints;
  int64_t step = 0;  // completed optimizer steps
  double lr = 0;     // of the last step
  cumulus::Precision precision;  // kFp32 or kBf16, chosen for this CPU
};

// The first line where two descriptions differ, as "key: a (checkpoint) vs b (this run)".
std::string firstDifference(const std::string& saved, const std::string& now) {
  std::istringstream a(saved), b(now);
  for (;;) {
    std::string line_a, line_b;
    const bool more_a = static_cast<bool>(std::getline(a, line_a));
    const bool more_b = static_cast<bool>(std::getline(b, line_b));
    if (!more_a && !more_b) return "";
    if (line_a != line_b) return "'" + line_a + "' in the checkpoint, '" + line_b + "' in this run";
  }
}

// Every rank loads the newest valid checkpoint, if any, and puts everything back.
void resume(Job& job) {
  std::vector<cumulus::CheckpointWarning> warnings;
  std::optional<cumulus::Checkpoint> latest = job.checkpoints.loadLatest(&warnings);
  for (const auto& w : warnings) {
    if (job.leader()) std::fprintf(stderr, "custom_loop: skipped %s\n", w.str().c_str());
  }
  if (!latest) return;
  const std::string path =
      job.checkpoints.dir() + "/" + cumulus::Checkpoints::dirName(latest->state.step);
  const std::string difference = firstDifference(latest->state.config_yaml, describe(job.flags));
  if (!difference.empty()) {
    throw cumulus::UserError(path + " was written with other flags (" + difference +
                             "): relaunch with the same flags, or use another --run-dir");
  }
  latest->restoreModule(*job.net);
  latest->restoreOptimizer(job.optimizer);
  job.sampler.restore(latest->sampler());
  latest->restoreRng();
  job.step = static_cast<int64_t>(latest->state.step);
  if (job.leader()) {
    std::printf("resumed from %s at step %lld\n", path.c_str(), static_cast<long long>(job.step));
  }
}

// One optimizer step over this rank's share of the global batch. Returns the sum of this rank's
// per-sample losses (for the progress line).
double trainStep(Job& job, cumulus::GradientSync& sync) {
  job.lr = learningRate(job.flags, job.step);
  for (auto& group : job.optimizer.param_groups()) {
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(job.lr);
  }
  const std::vector<int64_t> local = job.sampler.localIndices(job.group.rank(), job.group.size());
  job.sampler.advance();
  const torch::Tensor x = job.images.index_select(0, torch::tensor(local, torch::kInt64));

  job.optimizer.zero_grad();
  torch::Tensor reconstruction;
  {
    // bf16: the products in bfloat16 on casts of the float32 weights; the loss in float32.
    cumulus::Autocast autocast(job.precision);
    reconstruction = job.net->forward(x);
  }
  const torch::Tensor per_sample =
      torch::mse_loss(reconstruction.to(torch::kFloat32), x, torch::Reduction::None).mean(1);
  // Divided by the global batch, not this rank's share: the sum over ranks that DataParallel
  // forms is then the gradient of the mean loss over the global batch.
  sync.backward(per_sample.sum() / static_cast<double>(job.flags.batch));
  job.optimizer.step();
  ++job.step;
  return per_sample.sum().item<double>();
}

// The mean loss over the global batch (a collective: every rank calls it at the same steps).
void logProgress(Job& job, double local_loss_sum) {
  torch::Tensor total = torch::tensor({local_loss_sum}, torch::kFloat64);
  job.group.allreduce(total);
  if (!job.leader()) return;
  std::printf("step %lld/%lld loss %.6f lr %.6g\n", static_cast<long long>(job.step),
              static_cast<long long>(job.flags.steps),
              total.item<double>() / static_cast<double>(job.flags.batch), job.lr);
}

// Rank 0 only: everything a resume needs, durable when this returns.
std::string saveCheckpoint(Job& job, bool preempted) {
  cumulus::Checkpoint c;
  c.state.step = static_cast<uint64_t>(job.step);
  c.state.seed = static_cast<uint64_t>(job.flags.seed);
  c.state.world_size = static_cast<uint32_t>(job.group.size());
  c.state.global_batch = static_cast<uint64_t>(job.flags.batch);
  c.state.samples_seen = c.state.step * c.state.global_batch;
  c.state.model = "autoencoder";
  c.state.optimizer = "torch::optim::Adam";
  c.state.precision = cumulus::precisionName(job.precision);
  c.state.learning_rate = job.lr;
  c.state.preempted = preempted;
  c.state.generation = job.group.generation();
  c.state.run_id = job.group.runId();
  c.state.config_yaml = describe(job.flags);
  c.setSampler(job.sampler.state());
  c.captureRng();
  c.addModule(*job.net).addOptimizer(job.optimizer);
  return job.checkpoints.save(c).path;
}

// Rank 0 only: the parameters' bytes in named_parameters() order, for a test to hash.
void writeParameters(Job& job) {
  std::ofstream out(job.flags.out, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw cumulus::UserError(job.flags.out + ": cannot open for writing: " + std::strerror(errno));
  }
  size_t bytes = 0;
  for (const auto& item : job.net->named_parameters()) {
    const torch::Tensor t = item.value().detach().contiguous();
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    bytes += t.nbytes();
  }
  out.close();
  if (!out) throw std::runtime_error(job.flags.out + ": write failed: " + std::strerror(errno));
  std::printf("final parameters written to %s (%zu bytes)\n", job.flags.out.c_str(), bytes);
}

int train(const Flags& flags) {
  auto group = cumulus::ProcessGroup::fromEnvironment();
  // The writer holds the run directory while it runs: a second job there stops at once, naming
  // this one (pid, host, start time). Ranks of the same launch share CUMULUS_RUN_ID.
  std::optional<cumulus::RunDirectoryLock> lock;
  if (group->rank() == 0) {
    cumulus::RunDirectoryLockOptions lock_options;
    lock_options.program = "custom_loop";
    if (const char* id = std::getenv("CUMULUS_RUN_ID")) lock_options.run_id = id;
    lock.emplace(flags.run_dir, lock_options);
  } else {
    std::filesystem::create_directories(flags.run_dir);
  }
  if (flags.batch < group->size()) {
    throw cumulus::UserError("--batch " + std::to_string(flags.batch) + " is smaller than the " +
                             std::to_string(group->size()) + " ranks: each needs a sample");
  }
  Job job(flags, *group);
  if (job.leader()) {
    std::printf("precision: %s\n", cumulus::choosePrecision(flags.precision).text().c_str());
    // Before the first step, not at the first save: room for the checkpoints kept and the next
    // one, each the parameters and Adam's two moments (a full or read-only disk is exit 2 here).
    uint64_t bytes = 64 * 1024;
    for (const auto& p : job.net->parameters()) bytes += 3 * p.nbytes();
    job.checkpoints.checkRoom(bytes);
  }
  resume(job);
  cumulus::DataParallelOptions options;
  options.algorithm = flags.algorithm;
  cumulus::DataParallel sync(*group, options);
  sync.attach(job.net->parameters(), job.net->buffers());  // rank 0's values everywhere
  cumulus::PreemptionWatcher preemption(cumulus::agreeOver(*group));
  preemption.start();

  while (job.step < flags.steps) {
    const double loss_sum = trainStep(job, sync);
    if (job.step % flags.log_every == 0 || job.step == flags.steps) logProgress(job, loss_sum);
    // Every rank asks after every step but the last, and every rank gets the same answer.
    const cumulus::StepAction action =
        job.step < flags.steps ? preemption.decide(job.step) : cumulus::StepAction::kContinue;
    const bool due =
        job.step % flags.checkpoint_every == 0 || action != cumulus::StepAction::kContinue;
    std::string saved;
    if (due && job.leader()) saved = saveCheckpoint(job, action == cumulus::StepAction::kStop);
    if (action == cumulus::StepAction::kStop) {
      preemption.waitForAll();  // no rank exits before rank 0's checkpoint is durable
      if (job.leader()) {
        std::printf("preempted at step %lld, checkpoint %s\n", static_cast<long long>(job.step),
                    saved.c_str());
      }
      return cumulus::kExitPreempted;
    }
  }
  if (job.leader()) writeParameters(job);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines as they happen, through a pipe too
  // Before any thread starts: the handlers only record the signals, PreemptionWatcher reads them.
  cumulus::installSigtermHandler();
  cumulus::installCheckpointSignalHandler();
  try {
    const std::optional<Flags> flags = parseFlags(argc, argv);
    return flags ? train(*flags) : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loop: %s\n", e.what());
    return cumulus::exitCodeFor(e);
  }
}
