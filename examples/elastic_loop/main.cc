// elastic_loop: a training loop of the user's own that survives losing workers in place, on
// Cumulus's public elastic API (<cumulus/elastic.h>). A Fashion-MNIST classifier (784 -> hidden ->
// hidden -> 10 with GELU and a residual hidden block), a label-smoothed cross-entropy written here,
// SGD with momentum and weight decay, data-parallel over the workers cumulus-run starts.
//
// Under cumulus-run (recovery in place is its default) a worker that dies does not stop the
// others: they re-form in place and redo the step in flight, and the replacement cumulus-run
// starts joins at a step boundary and takes the state from a live peer. A SIGTERM to cumulus-run
// checkpoints and exits 75; a relaunch resumes bit-exactly.
//
//   cumulus-run --standalone --nproc-per-node 3 -- elastic_loop --data DIR --run-dir DIR
//
// Its records (<cumulus/recorder.h>) go to DIR/metrics.jsonl and DIR/tensorboard, and under
// `cumulus-run --metrics-port P` to the job's live endpoint and dashboard.
//
// See README.md for the flags and what it prints.
#include <cumulus/cumulus.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int64_t kPixels = 28 * 28;
constexpr int64_t kClasses = 10;

struct Flags {
  std::string data;
  std::string run_dir;
  int64_t steps = 600;
  int64_t batch = 96;  // global: the workers split it
  int64_t hidden = 128;
  int64_t checkpoint_every = 100;
  int64_t log_every = 50;
  int64_t limit = 0;  // the first `limit` images; 0: all 60000
  int64_t seed = 1;
  int64_t wait_for = 0;  // at each boundary, wait until the group has this many workers again
  double lr = 0.05;
  double smoothing = 0.1;
};

const char* kUsage = R"(usage: elastic_loop --data DIR --run-dir DIR [flags]

  --data DIR              the uncompressed Fashion-MNIST training files (train-images-idx3-ubyte,
                          train-labels-idx1-ubyte): gunzip /usr/share/datasets/fashion-mnist/train-*.gz
  --run-dir DIR           checkpoints (DIR/checkpoints); a relaunch with the same DIR resumes
  --steps N               optimizer steps (600)
  --batch N               global batch, split over the workers (96)
  --hidden N              hidden width (128)
  --lr X                  SGD learning rate, momentum 0.9 (0.05)
  --smoothing X           label smoothing of the loss, in [0, 1) (0.1)
  --checkpoint-every N    steps between checkpoints (100)
  --log-every N           steps between progress lines (50)
  --limit N               train on the first N images only (0: all)
  --seed N                initialization and shuffling (1)
  --wait-for N            after losing a worker, wait at the next step boundary (up to 120 s)
                          until the group has N workers again (0: never wait)

Exit status: 0 done, 2 a bad flag or missing data, 75 preempted (relaunch to resume), 1 any other
failure.
)";

int64_t integerFlag(const std::string& flag, const std::string& value, int64_t min) {
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

double realFlag(const std::string& flag, const std::string& value, double min, double below) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !(x >= min && x < below)) {
    throw cumulus::UserError(flag + ": expected a number in [" + std::to_string(min) + ", " +
                             std::to_string(below) + "), got '" + value + "'");
  }
  return x;
}

std::optional<Flags> parseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return std::nullopt;
    }
    const size_t eq = arg.find('=');
    const std::string k = arg.substr(0, eq);
    const bool known = k == "--data" || k == "--run-dir" || k == "--steps" || k == "--batch" ||
                       k == "--hidden" || k == "--lr" || k == "--smoothing" ||
                       k == "--checkpoint-every" || k == "--log-every" || k == "--limit" ||
                       k == "--seed" || k == "--wait-for";
    if (!known) {
      throw cumulus::UserError(
          (arg.rfind("--", 0) == 0 ? "unknown flag " + k : "unexpected argument '" + arg + "'") +
          "; see elastic_loop --help");
    }
    if (eq == std::string::npos && i + 1 == argc) {
      throw cumulus::UserError(k + " needs a value; see elastic_loop --help");
    }
    const std::string v = eq == std::string::npos ? argv[++i] : arg.substr(eq + 1);
    if (k == "--data") f.data = v;
    if (k == "--run-dir") f.run_dir = v;
    if (k == "--steps") f.steps = integerFlag(k, v, 1);
    if (k == "--batch") f.batch = integerFlag(k, v, 1);
    if (k == "--hidden") f.hidden = integerFlag(k, v, 1);
    if (k == "--lr") f.lr = realFlag(k, v, 1e-12, 1e6);
    if (k == "--smoothing") f.smoothing = realFlag(k, v, 0, 1);
    if (k == "--checkpoint-every") f.checkpoint_every = integerFlag(k, v, 1);
    if (k == "--log-every") f.log_every = integerFlag(k, v, 1);
    if (k == "--limit") f.limit = integerFlag(k, v, 0);
    if (k == "--seed") f.seed = integerFlag(k, v, 0);
    if (k == "--wait-for") f.wait_for = integerFlag(k, v, 0);
  }
  if (f.data.empty() || f.run_dir.empty()) {
    throw cumulus::UserError(std::string(f.data.empty() ? "--data" : "--run-dir") +
                             " is required; see elastic_loop --help");
  }
  return f;
}

// What a state must have been built with to be resumed or received by this run.
std::string describe(const Flags& f) {
  std::ostringstream out;
  out << "hidden: " << f.hidden << "\nbatch: " << f.batch << "\nsteps: " << f.steps
      << "\nlr: " << f.lr << "\nsmoothing: " << f.smoothing << "\nlimit: " << f.limit
      << "\nseed: " << f.seed << "\n";
  return out.str();
}

struct Data {
  torch::Tensor images;  // [N, 784] in [0, 1]
  torch::Tensor labels;  // [N] int64
};

Data loadData(const Flags& flags) {
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
  Data d{mnist.images().reshape({-1, kPixels}), mnist.targets().to(torch::kInt64)};
  if (flags.limit > d.images.size(0)) {
    throw cumulus::UserError("--limit " + std::to_string(flags.limit) + ": the training set has " +
                             std::to_string(d.images.size(0)) + " images");
  }
  if (flags.limit > 0) {
    d.images = d.images.narrow(0, 0, flags.limit);
    d.labels = d.labels.narrow(0, 0, flags.limit);
  }
  d.images = d.images.contiguous();
  d.labels = d.labels.contiguous();
  return d;
}

// 784 -> hidden, a residual block hidden -> hidden, -> 10 logits.
struct ClassifierImpl : torch::nn::Module {
  explicit ClassifierImpl(int64_t hidden)
      : in(register_module("in", torch::nn::Linear(kPixels, hidden))),
        block(register_module("block", torch::nn::Linear(hidden, hidden))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        out(register_module("out", torch::nn::Linear(hidden, kClasses))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = torch::gelu(in->forward(x));
    return out->forward(norm->forward(h + torch::gelu(block->forward(h))));
  }
  torch::nn::Linear in, block;
  torch::nn::LayerNorm norm;
  torch::nn::Linear out;
};
TORCH_MODULE(Classifier);

// Per-sample cross-entropy against labels smoothed by `eps`: (1 - eps) on the class, eps / 10
// spread over all ten.
torch::Tensor smoothedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                   double eps) {
  const torch::Tensor logp = torch::log_softmax(logits, 1);
  const torch::Tensor nll = -logp.gather(1, labels.unsqueeze(1)).squeeze(1);
  return (1 - eps) * nll - eps * logp.mean(1);
}

struct Job {
  explicit Job(const Flags& f)
      : flags(f),
        data(loadData(f)),
        net((torch::manual_seed(static_cast<uint64_t>(f.seed)), Classifier(f.hidden))),
        optimizer(net->parameters(),
                  torch::optim::SGDOptions(f.lr).momentum(0.9).weight_decay(1e-4)),
        sampler(data.images.size(0), f.batch, static_cast<uint64_t>(f.seed), /*shuffle=*/true,
                /*drop_last=*/true),
        checkpoints(f.run_dir + "/checkpoints", /*keep=*/2) {}

  // What heals a member and what a checkpoint holds: the same value.
  cumulus::Checkpoint capture() const {
    cumulus::Checkpoint c;
    c.state.seed = static_cast<uint64_t>(flags.seed);
    c.state.global_batch = static_cast<uint64_t>(flags.batch);
    c.state.model = "elastic_loop classifier";
    c.state.optimizer = "torch::optim::SGD";
    c.setSampler(sampler.state());
    c.addModule(*net).addOptimizer(optimizer);
    return c;
  }
  void restore(const cumulus::Checkpoint& c) {
    c.restoreModule(*net);
    c.restoreOptimizer(optimizer);
    sampler.restore(c.sampler());
  }

  const Flags& flags;
  Data data;
  Classifier net;
  torch::optim::SGD optimizer;
  cumulus::DistributedSampler sampler;
  cumulus::Checkpoints checkpoints;
};

std::string parametersDigest(Classifier& net) {
  std::string bytes;
  for (const auto& p : net->parameters()) {
    const torch::Tensor t = p.detach().contiguous();
    bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  // FNV-1a, 64 bits: enough to tell replicas apart in a log.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string joined(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  return text;
}

// One line per membership: who this worker is now, and why it changed.
void printMembership(const cumulus::Membership& m) {
  char took[32];
  std::snprintf(took, sizeof took, "%.3f", m.seconds);
  std::string line = "membership: epoch " + std::to_string(m.epoch) + ", rank " +
                     std::to_string(m.rank) + " of " + std::to_string(m.size) + ", step " +
                     std::to_string(m.step) + " (" + m.cause + " in " + took + " s), pid " +
                     std::to_string(::getpid());
  if (m.source >= 0) {
    line += ", state from rank " + std::to_string(m.source) + " to " + joined(m.healed);
  }
  std::printf("%s\n", line.c_str());
  if (!m.reason.empty()) std::printf("re-formed after: %s\n", m.reason.c_str());
}

// The newest checkpoint of the same flags put back into `job`; its step, or 0 without one.
int64_t resumeLatest(Job& job) {
  std::optional<cumulus::Checkpoint> latest = job.checkpoints.loadLatest();
  if (!latest) return 0;
  if (latest->state.config_yaml != describe(job.flags)) {
    throw cumulus::UserError(job.checkpoints.dir() +
                             " holds checkpoints of other flags: relaunch with the same flags, "
                             "or use another --run-dir");
  }
  job.restore(*latest);
  return static_cast<int64_t>(latest->state.step);
}

// Rank 0 only: the state of elastic.step() as a checkpoint, durable when this returns; its path.
std::string save(Job& job, const cumulus::Elastic& elastic, bool preempted) {
  cumulus::Checkpoint c = job.capture();
  c.state.step = static_cast<uint64_t>(elastic.step());
  c.state.config_yaml = describe(job.flags);
  c.state.world_size = static_cast<uint32_t>(elastic.size());
  c.state.preempted = preempted;
  return job.checkpoints.save(c).path;
}

// One whole step: its collectives (the gradient sum, the loss for the log) come before the update,
// so Elastic may run it again after a failure. `mine` gets this worker's mean loss and samples;
// returns the group's mean loss at a log step, else 0.
double trainStep(Job& job, cumulus::Elastic& elastic, cumulus::StepMetrics& mine) {
  const Flags& flags = job.flags;
  const std::vector<int64_t> local = job.sampler.localIndices(elastic.rank(), elastic.size());
  const torch::Tensor idx = torch::tensor(local, torch::kInt64);
  job.optimizer.zero_grad();
  const torch::Tensor per_sample =
      smoothedCrossEntropy(job.net->forward(job.data.images.index_select(0, idx)),
                           job.data.labels.index_select(0, idx), flags.smoothing);
  mine.loss = per_sample.mean().item<double>();
  mine.samples = static_cast<int64_t>(local.size());
  elastic.sync().backward(per_sample.sum() / static_cast<double>(flags.batch));
  double loss = 0;
  const int64_t next = elastic.step() + 1;
  if (next % flags.log_every == 0 || next == flags.steps) {
    torch::Tensor total = torch::tensor({per_sample.sum().item<double>()}, torch::kFloat64);
    elastic.group().allreduce(total);
    loss = total.item<double>() / static_cast<double>(flags.batch);
  }
  job.optimizer.step();
  job.sampler.advance();
  return loss;
}

int train(const Flags& flags) {
  Job job(flags);
  cumulus::ElasticOptions options;
  options.wait_for_members = static_cast<int>(flags.wait_for);
  cumulus::Elastic elastic({[&] { return job.capture(); },
                            [&](const cumulus::Checkpoint& c) { job.restore(c); }, describe(flags)},
                           options);
  elastic.attach(job.net->parameters(), job.net->buffers());  // buffers: kept identical
  elastic.onMembershipChange(printMembership);

  // A launch member resumes from the newest checkpoint; a replacement takes the state from a peer.
  const int64_t resumed = resumeLatest(job);
  if (!elastic.start(resumed)) {
    std::printf("the group finished before this worker was admitted\n");
    return 0;
  }
  if (resumed > 0 && elastic.rank() == 0 && elastic.epoch() == 0) {
    std::printf("resumed at step %lld\n", static_cast<long long>(resumed));
  }
  // This program prints its own lines; the recorder writes the files and feeds the endpoint.
  cumulus::RecorderOptions records;
  records.run_dir = flags.run_dir;
  records.total_steps = flags.steps;
  records.log_every_steps = flags.log_every;
  records.start_step = resumed;
  records.console = nullptr;
  cumulus::Recorder recorder(elastic, records);

  while (elastic.step() < flags.steps) {
    double loss = 0;
    cumulus::StepMetrics mine;  // this worker's mean loss and samples, for the recorder
    // Elastic may run the step again after a failure.
    elastic.train([&] { loss = trainStep(job, elastic, mine); });
    const int64_t done = elastic.step();
    mine.lr = flags.lr;
    mine.global_samples = flags.batch;
    recorder.step(mine);
    if ((done % flags.log_every == 0 || done == flags.steps) && elastic.rank() == 0) {
      std::printf("step %lld/%lld loss %.6f workers %d\n", static_cast<long long>(done),
                  static_cast<long long>(flags.steps), loss, elastic.size());
    }
    if (done == flags.steps) break;
    const cumulus::ElasticAction action = elastic.boundary();
    if (action == cumulus::ElasticAction::kLeave) {
      std::printf("preempted at step %lld: left the group, which trains on\n",
                  static_cast<long long>(done));
      return cumulus::kExitPreempted;
    }
    const bool due = done % flags.checkpoint_every == 0 ||
                     action == cumulus::ElasticAction::kCheckpoint ||
                     action == cumulus::ElasticAction::kStop;
    const bool stop = action == cumulus::ElasticAction::kStop;
    std::string saved;  // timed by the recorder: its stall, and a mark on the dashboard
    if (due && elastic.rank() == 0)
      saved = recorder.checkpoint([&] { return save(job, elastic, stop); });
    if (stop) {
      elastic.waitForAll();  // no worker exits before the checkpoint is durable
      recorder.preempted(saved);
      if (elastic.rank() == 0) {
        std::printf("preempted at step %lld, checkpoint %s\n", static_cast<long long>(done),
                    saved.c_str());
      }
      return cumulus::kExitPreempted;
    }
  }
  elastic.finish();
  if (elastic.rank() == 0) recorder.checkpoint([&] { return save(job, elastic, false); });
  cumulus::RunTotals totals;  // the summary says them
  for (const torch::Tensor& p : job.net->parameters()) totals.parameters += p.numel();
  totals.parameter_digest = parametersDigest(job.net);
  recorder.finish(totals);
  std::printf("final parameters %s at step %lld\n", totals.parameter_digest.c_str(),
              static_cast<long long>(elastic.step()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  cumulus::installSigtermHandler();
  cumulus::installCheckpointSignalHandler();
  try {
    const std::optional<Flags> flags = parseFlags(argc, argv);
    return flags ? train(*flags) : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_loop: %s\n", e.what());
    return cumulus::exitCodeFor(e);
  }
}
