// DistributedGradientSync end to end, ranks as threads over real loopback (as Gloo's tests):
// each rank builds its own model (from a different seed: attach() must make them identical),
// trains on its slice of a global batch with data_parallel.h's loss normalization, and
// synchronizes through its own Communicator. The answers are checked against one process that
// trains on the whole global batch.

#include "distributed/distributed_sync.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/error.h"
#include "comm/memory_store.h"
#include "comm/parameter_server.h"
#include "cumulus/data_parallel.h"
#include "distributed/flat_parameters.h"
#include "distributed/group_connection.h"
#include "tests/distributed/thread_ranks.h"

namespace cumulus::distributed {
namespace {

constexpr int64_t kFeatures = 8;
constexpr int64_t kClasses = 4;
constexpr int64_t kSamples = 64;
constexpr double kLr = 0.1;
constexpr char kToken[] = "test-token";

// fc1 → fc2 → (extra, optional) → out. Parameter bytes, registration order:
// fc1 768+96, fc2 2304+96, extra 2304+96, out 384+16.
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(kFeatures, 24));
    fc2 = register_module("fc2", torch::nn::Linear(24, 24));
    extra = register_module("extra", torch::nn::Linear(24, 24));
    out = register_module("out", torch::nn::Linear(24, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_extra) {
    torch::Tensor h = torch::relu(fc2(torch::relu(fc1(x))));
    if (use_extra) h = h + torch::relu(extra(h));
    return out(h);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, extra{nullptr}, out{nullptr};
};

struct Data {
  torch::Tensor x, y;
};

Data makeData() {
  torch::manual_seed(123);
  return {torch::randn({kSamples, kFeatures}), torch::randint(kClasses, {kSamples})};
}

std::shared_ptr<Net> makeNet(uint64_t seed) {
  torch::manual_seed(seed);
  return std::make_shared<Net>();
}

uint64_t hashParams(const std::vector<torch::Tensor>& params) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& p : params) {
    const torch::Tensor c = p.contiguous();
    const auto* bytes = static_cast<const uint8_t*>(c.data_ptr());
    for (size_t i = 0; i < static_cast<size_t>(c.nbytes()); ++i) {
      h ^= bytes[i];
      h *= 1099511628211ULL;
    }
  }
  return h;
}

float maxAbsDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<float>());
  }
  return worst;
}

std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone());
  return copies;
}

void sgd(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) p.sub_(p.grad() * kLr);
}

struct Plan {
  int world = 2;
  std::string algorithm = "ring";
  int steps = 10;
  int64_t global_batch = 16;
  int accumulation = 1;
  bool bucket_view = true;
  bool replace_grads = false;  // the "trainer" gives every step fresh gradient tensors
  bool flat = false;           // the parameters are FlatParameters in the sync's layout
  // Per (step, rank): whether the extra layer runs; whether the rank skips backward entirely.
  std::function<bool(int, int)> use_extra = [](int, int) { return true; };
  std::function<bool(int, int)> skip_backward = [](int, int) { return false; };
  bool trace = false;
  std::string compression = "none";
};

// Rows of rank `rank`'s slice of step `step`'s global batch.
std::pair<int64_t, int64_t> slice(const Plan& plan, int step, int rank) {
  const int64_t start = (step * plan.global_batch) % kSamples;
  return {start + plan.global_batch * rank / plan.world,
          start + plan.global_batch * (rank + 1) / plan.world};
}

void zeroGrads(const std::vector<torch::Tensor>& params, bool replace) {
  for (const auto& p : params) {
    if (p.grad().defined() && !replace) {
      p.grad().zero_();
    } else {
      p.mutable_grad() = torch::zeros_like(p);
    }
  }
}

struct RankResult {
  std::vector<uint64_t> hashes;  // after each step
  std::vector<torch::Tensor> params;
  std::vector<uint64_t> collectives;  // per step
  std::vector<SyncStepStats> stats;
  std::vector<BucketSpec> layout;
  std::vector<BucketEvent> bucket_events;  // plan.trace: what on_bucket_done was told
  bool grads_in_place = true;              // plan.flat: every .grad() stayed in the flat buffers
};

GroupOptions groupOptions(const Plan& plan) {
  GroupOptions options;
  options.algorithm = parseAlgorithm(plan.algorithm);
  options.timeout_seconds = 20;
  return options;
}

// The sync's options beside a group's: its algorithm and deadline, the default buckets.
DistributedSyncOptions syncOptionsOf(const GroupOptions& group) {
  DistributedSyncOptions options;
  options.algorithm = group.algorithm;
  options.timeout = timeoutOption(group.timeout_seconds, "timeout_seconds");
  return options;
}

// Small buckets (2560 and 512 bytes), so that the plan's parameters span several.
DistributedSyncOptions syncOptions(const Plan& plan) {
  DistributedSyncOptions options = syncOptionsOf(groupOptions(plan));
  options.bucket_cap_bytes = 2560;
  options.first_bucket_bytes = 512;
  options.compression = parseCompression(plan.compression);
  return options;
}

// This rank's share of step `step`, in plan.accumulation micro-batches, through `sync`'s calls.
void backwardShare(const Plan& plan, const Data& data, Net& net, GradientSync& sync, int step,
                   int rank) {
  const auto [begin, end] = slice(plan, step, rank);
  for (int i = 0; i < plan.accumulation; ++i) {
    const bool last = i == plan.accumulation - 1;
    const int64_t b = begin + (end - begin) * i / plan.accumulation;
    const int64_t e = begin + (end - begin) * (i + 1) / plan.accumulation;
    sync.beforeBackward(last);
    if (e > b && !plan.skip_backward(step, rank)) {
      const torch::Tensor logits = net.forward(data.x.slice(0, b, e), plan.use_extra(step, rank));
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(
              logits, data.y.slice(0, b, e),
              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
          static_cast<double>(plan.global_batch);
      loss.backward();
    }
    sync.afterBackward(last);
  }
}

// What on_bucket_done reports, from the sync's watcher thread.
class BucketLog {
 public:
  std::function<void(const BucketEvent&)> observer() {
    return [this](const BucketEvent& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(e);
    };
  }
  std::vector<BucketEvent> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(events_);
  }

 private:
  std::mutex mutex_;
  std::vector<BucketEvent> events_;
};

// Runs `plan` on plan.world threads; returns each rank's result.
std::vector<RankResult> runGroup(const Plan& plan) {
  torch::set_num_threads(1);  // the intra-op pool is process-wide
  const Data data = makeData();
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < plan.world; ++r) nets.push_back(makeNet(1000 + r));  // rank 0's wins
  std::unique_ptr<comm::ParameterServer> server;
  if (plan.algorithm == "funnel") {
    server = std::make_unique<comm::ParameterServer>("", 0, kToken, plan.world);
  }
  comm::MemoryStore store;
  std::vector<RankResult> results(plan.world);
  runOnThreads(plan.world, [&](int rank) {
    base::RunEnv env;
    env.rank = rank;
    env.world_size = plan.world;
    env.job_token = kToken;
    if (server) env.ps_endpoint = "127.0.0.1:" + std::to_string(server->port());
    GroupConnection group(env, groupOptions(plan), store);
    BucketLog bucket_log;
    DistributedSyncOptions options = syncOptions(plan);
    options.gradient_as_bucket_view = plan.bucket_view;
    if (plan.trace) options.on_bucket_done = bucket_log.observer();
    DistributedGradientSync sync(group.communicator(), options);
    Net& net = *nets[rank];
    const std::vector<torch::Tensor> params = net.parameters();
    std::unique_ptr<FlatParameters> flat;
    if (plan.flat) {
      flat = std::make_unique<FlatParameters>(
          params, layoutOf(params, options.bucket_cap_bytes, options.first_bucket_bytes));
      flat->zeroGrads();
    }
    sync.attach(params);
    RankResult& result = results[rank];
    if (flat) result.grads_in_place = flat->gradsInPlace();
    result.layout = sync.buckets();
    for (int step = 0; step < plan.steps; ++step) {
      const uint64_t seq_before = group.communicator().nextSeq();
      if (flat) {
        flat->zeroGrads();
      } else {
        zeroGrads(params, plan.replace_grads);
      }
      backwardShare(plan, data, net, sync, step, rank);
      sync.finish();
      if (flat) result.grads_in_place = result.grads_in_place && flat->gradsInPlace();
      result.collectives.push_back(group.communicator().nextSeq() - seq_before);
      result.stats.push_back(sync.lastStep());
      sgd(params);
      result.hashes.push_back(hashParams(params));
    }
    result.params = snapshot(params);
    if (plan.trace) result.bucket_events = bucket_log.take();
  });
  return results;
}

// One process, no communication: the same steps, with every rank's slice in one backward.
// `fused`: one forward over the whole global batch (the single-worker run); otherwise one
// forward per simulated rank with that rank's flags.
std::vector<torch::Tensor> runReference(const Plan& plan, bool fused) {
  torch::set_num_threads(1);
  const Data data = makeData();
  auto net = makeNet(1000);
  const std::vector<torch::Tensor> params = net->parameters();
  for (int step = 0; step < plan.steps; ++step) {
    zeroGrads(params, false);
    torch::Tensor loss = torch::zeros({});
    auto lossOf = [&](int64_t b, int64_t e, bool use_extra) {
      return torch::nn::functional::cross_entropy(
                 net->forward(data.x.slice(0, b, e), use_extra), data.y.slice(0, b, e),
                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
             static_cast<double>(plan.global_batch);
    };
    if (fused) {
      const int64_t start = (step * plan.global_batch) % kSamples;
      loss = lossOf(start, start + plan.global_batch, true);
    } else {
      for (int r = 0; r < plan.world; ++r) {
        if (plan.skip_backward(step, r)) continue;
        const auto [b, e] = slice(plan, step, r);
        loss = loss + lossOf(b, e, plan.use_extra(step, r));
      }
    }
    loss.backward();
    sgd(params);
  }
  return snapshot(params);
}

void expectReplicasIdentical(const std::vector<RankResult>& results) {
  for (size_t r = 1; r < results.size(); ++r) {
    ASSERT_EQ(results[r].hashes.size(), results[0].hashes.size());
    for (size_t s = 0; s < results[0].hashes.size(); ++s) {
      EXPECT_EQ(results[r].hashes[s], results[0].hashes[s])
          << "rank " << r << " differs from rank 0 after step " << s + 1;
    }
  }
}

// 2 workers × batch 8 against 1 worker × batch 16, after 10 SGD steps. Only the order of
// floating-point summation differs (per-rank partial GEMMs then an all-reduce, against one GEMM
// over 16 rows), each step's gradient differs by a few float32 ulps (~1e-8 here) and ten steps of
// lr 0.1 keep the parameters within 1e-6.
constexpr float kOrderTolerance = 1e-6f;

class AlgorithmTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AlgorithmTest, TwoWorkersMatchOneWorkerWithTheWholeBatch) {
  Plan plan;
  plan.algorithm = GetParam();
  const auto results = runGroup(plan);
  expectReplicasIdentical(results);
  const float diff = maxAbsDiff(results[0].params, runReference(plan, /*fused=*/true));
  EXPECT_LE(diff, kOrderTolerance);
  std::printf("[ %s ] max |2 workers - 1 worker| after %d steps: %.3g\n", plan.algorithm.c_str(),
              plan.steps, diff);
  // Every bucket was launched from a backward hook: communication overlapped backward.
  for (const auto& stats : results[0].stats) {
    EXPECT_EQ(stats.launched_in_backward, results[0].layout.size());
  }
}

TEST_P(AlgorithmTest, ThreeWorkersStayIdenticalAndMatchTheSingleProcessSum) {
  Plan plan;
  plan.algorithm = GetParam();
  plan.world = 3;
  plan.global_batch = 15;
  plan.steps = 6;
  const auto results = runGroup(plan);
  expectReplicasIdentical(results);
  EXPECT_LE(maxAbsDiff(results[2].params, runReference(plan, /*fused=*/false)), kOrderTolerance);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlgorithmTest,
                         ::testing::Values("tree", "ring", "funnel", "auto"));

// The library's options and the public API's start alike, as DDP does: gradients copied into
// the buckets and back unless the program asks for views.
TEST(DistributedSyncTest, DefaultsAreThePublicApis) {
  const DataParallelOptions api;
  const DistributedSyncOptions library;
  EXPECT_FALSE(api.gradient_as_bucket_view);
  EXPECT_EQ(library.gradient_as_bucket_view, api.gradient_as_bucket_view);
  EXPECT_EQ(library.bucket_cap_bytes, static_cast<size_t>(api.bucket_cap_mb * (1 << 20)));
  EXPECT_EQ(library.first_bucket_bytes, static_cast<size_t>(api.first_bucket_mb * (1 << 20)));
}

TEST(DistributedSyncTest, BucketsAreReverseOrderedCappedAndTheFirstIsSmall) {
  Plan plan;
  plan.steps = 1;
  const auto layout = runGroup(plan)[0].layout;
  // Parameters: 0 fc1.w 768 B, 1 fc1.b 96, 2 fc2.w 2304, 3 fc2.b 96, 4 extra.w 2304,
  // 5 extra.b 96, 6 out.w 384, 7 out.b 16; first cap 512 B, then 2560 B.
  ASSERT_EQ(layout.size(), 4u);
  EXPECT_THAT(layout[0].params, ::testing::ElementsAre(7, 6, 5));
  EXPECT_THAT(layout[1].params, ::testing::ElementsAre(4, 3));
  EXPECT_THAT(layout[2].params, ::testing::ElementsAre(2, 1));
  EXPECT_THAT(layout[3].params, ::testing::ElementsAre(0));
  EXPECT_LE(layout[0].bytes(), 512u);
  for (const auto& b : layout) EXPECT_LE(b.bytes(), 2560u);
}

TEST(DistributedSyncTest, UnusedParametersAndSkippedBackwardNeitherHangNorDiverge) {
  Plan plan;
  plan.algorithm = "tree";
  // Rank 0 skips the extra layer on odd steps, rank 1 on steps divisible by 3; on step 4 rank 1
  // has no backward at all (an empty share of the batch).
  plan.use_extra = [](int step, int rank) { return rank == 0 ? step % 2 == 0 : step % 3 != 0; };
  plan.skip_backward = [](int step, int rank) { return step == 4 && rank == 1; };
  const auto results = runGroup(plan);
  expectReplicasIdentical(results);
  EXPECT_LE(maxAbsDiff(results[0].params, runReference(plan, /*fused=*/false)), kOrderTolerance);
  // Step 1: rank 0 left extra.b (in bucket 0) unused, so nothing could launch during backward.
  EXPECT_EQ(results[0].stats[1].launched_in_backward, 0u);
  EXPECT_EQ(results[1].stats[4].launched_in_backward, 0u);
}

// Gradients already in FlatParameters laid out as the sync's buckets: attach() leaves every
// .grad() where it is (it would point them into buckets of its own otherwise) and the buckets it
// reduces are those buffers, so the sums land there.
TEST(DistributedSyncTest, FlatGradientsAreReducedWhereTheyAre) {
  Plan plan;
  plan.flat = true;
  const auto results = runGroup(plan);
  expectReplicasIdentical(results);
  for (const auto& r : results) EXPECT_TRUE(r.grads_in_place);
  EXPECT_LE(maxAbsDiff(results[0].params, runReference(plan, /*fused=*/true)), kOrderTolerance);
  // Bit for bit what the sync's own buckets give.
  Plan own = plan;
  own.flat = false;
  EXPECT_EQ(runGroup(own)[0].hashes, results[0].hashes);
}

TEST(DistributedSyncTest, AccumulationSyncsOncePerStep) {
  Plan plan;
  plan.accumulation = 2;
  plan.steps = 4;
  const auto results = runGroup(plan);
  expectReplicasIdentical(results);
  for (const auto& r : results) {
    for (uint64_t n : r.collectives) EXPECT_EQ(n, r.layout.size()) << "one all-reduce per bucket";
  }
  // Two micro-batches of 4 per rank sum to the same gradient as one of 8.
  Plan once = plan;
  once.accumulation = 1;
  EXPECT_LE(maxAbsDiff(results[0].params, runGroup(once)[0].params), kOrderTolerance);
}

TEST(DistributedSyncTest, CopyModeAndReplacedGradientsGiveBitIdenticalResults) {
  Plan plan;
  const auto view = runGroup(plan);
  plan.bucket_view = false;
  const auto copy = runGroup(plan);
  plan.bucket_view = true;
  plan.replace_grads = true;
  const auto replaced = runGroup(plan);
  EXPECT_EQ(copy[0].hashes, view[0].hashes);
  EXPECT_EQ(replaced[0].hashes, view[0].hashes);
}

TEST(DistributedSyncTest, GradientsAreViewsIntoTheBuckets) {
  torch::set_num_threads(1);
  comm::MemoryStore store;
  GroupOptions config;
  GroupConnection group(base::RunEnv{}, config, store);
  DistributedSyncOptions options = syncOptionsOf(config);
  options.gradient_as_bucket_view = true;
  DistributedGradientSync sync(group.communicator(), options);
  auto net = makeNet(1);
  const auto params = net->parameters();
  sync.attach(params);
  ASSERT_EQ(sync.buckets().size(), 1u);  // 6 KiB < 1 MiB first bucket
  const auto& bucket = sync.buckets()[0];
  const char* base = static_cast<const char*>(params[bucket.params[0]].grad().data_ptr());
  for (size_t s = 0; s < bucket.params.size(); ++s) {
    EXPECT_EQ(static_cast<const char*>(params[bucket.params[s]].grad().data_ptr()),
              base + bucket.offsets[s] * sizeof(float));
  }
}

// Every bucket of every step is reported once, before finish() returns, with its size, the
// algorithm it ran with and its collective's sequence number.
TEST(DistributedSyncTest, ReportsEveryBucketToTheObserverBeforeFinishReturns) {
  Plan plan;
  plan.steps = 3;
  plan.trace = true;
  const auto results = runGroup(plan);
  const std::vector<BucketEvent>& events = results[1].bucket_events;
  const std::vector<BucketSpec>& layout = results[1].layout;
  ASSERT_EQ(events.size(), 3 * layout.size());
  std::vector<uint64_t> seqs;
  for (size_t i = 0; i < events.size(); ++i) {
    const BucketEvent& e = events[i];
    EXPECT_EQ(e.bytes, layout[e.bucket].bytes()) << i;
    EXPECT_EQ(e.params, layout[e.bucket].params.size()) << i;
    EXPECT_EQ(e.algorithm, "ring") << i;
    EXPECT_FALSE(e.failed) << i;
    EXPECT_LE(e.launched, e.completed) << i;
    seqs.push_back(e.seq);
  }
  std::sort(seqs.begin(), seqs.end());
  EXPECT_EQ(std::adjacent_find(seqs.begin(), seqs.end()), seqs.end()) << "a bucket reported twice";
}

// comm.compression bf16 keeps the overlap (every bucket launched from a backward hook), reports
// each bucket with its bytes on the wire (2 per element), leaves the replicas identical, and stays
// near the uncompressed run: error feedback carries each step's rounding into the next, so after
// 10 steps of lr 0.1 the parameters differ by about a bf16 rounding of one step's update.
TEST(DistributedSyncTest, Bf16CompressionOverlapsBackwardAndStaysNearFloat32) {
  Plan plan;
  plan.trace = true;
  plan.compression = "bf16";
  const auto results = runGroup(plan);
  expectReplicasIdentical(results);
  for (const auto& stats : results[0].stats) {
    EXPECT_EQ(stats.launched_in_backward, results[0].layout.size());
  }
  const std::vector<BucketSpec>& layout = results[0].layout;
  ASSERT_EQ(results[0].bucket_events.size(), plan.steps * layout.size());
  for (const BucketEvent& e : results[0].bucket_events) {
    EXPECT_EQ(e.bytes, layout[e.bucket].numel * 2) << "bucket " << e.bucket;
  }
  Plan plain = plan;
  plain.compression = "none";
  const float diff = maxAbsDiff(results[0].params, runGroup(plain)[0].params);
  EXPECT_GT(diff, 0.0f) << "compression changed nothing";
  EXPECT_LE(diff, 1e-3f);
  std::printf("[ bf16 ] max |compressed - float32| after %d steps: %.3g\n", plan.steps, diff);
}

TEST(DistributedSyncTest, BroadcastCopiesRankZerosTensorsOfAnyDType) {
  torch::set_num_threads(1);
  comm::MemoryStore store;
  std::vector<std::vector<torch::Tensor>> tensors(2);
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex mutex;
  for (int rank = 0; rank < 2; ++rank) {
    tensors[rank] = {torch::full({3, 2}, rank + 1.0).t(),  // non-contiguous
                     torch::full({5}, int64_t{rank + 7}, torch::kLong),
                     torch::full({1}, rank == 0, torch::kBool)};
  }
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        base::RunEnv env;
        env.rank = rank;
        env.world_size = 2;
        GroupOptions config;
        GroupConnection group(env, config, store);
        DistributedGradientSync sync(group.communicator(), syncOptionsOf(config));
        sync.broadcastTensors(tensors[rank]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  EXPECT_TRUE(tensors[1][0].equal(torch::full({2, 3}, 1.0)));
  EXPECT_TRUE(tensors[1][1].equal(torch::full({5}, int64_t{7}, torch::kLong)));
  EXPECT_TRUE(tensors[1][2].item<bool>());
}

TEST(DistributedSyncTest, RanksWithDifferentModelsFailAtAttachNamingTheRank) {
  torch::set_num_threads(1);
  comm::MemoryStore store;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      base::RunEnv env;
      env.rank = rank;
      env.world_size = 2;
      GroupOptions config;
      GroupConnection group(env, config, store);
      DistributedGradientSync sync(group.communicator(), syncOptionsOf(config));
      std::vector<torch::Tensor> params = {
          torch::zeros({rank == 0 ? 4 : 5}, torch::requires_grad())};
      try {
        sync.attach(params);
      } catch (const std::invalid_argument& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    EXPECT_THAT(e, ::testing::HasSubstr("rank 1's parameters differ from rank 0's"));
  }
}

TEST(DistributedSyncTest, APeerThatLeavesMakesFinishThrowNamingIt) {
  torch::set_num_threads(1);
  comm::MemoryStore store;
  std::string error;
  int peer = -2;
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      base::RunEnv env;
      env.rank = rank;
      env.world_size = 2;
      GroupOptions config;
      config.algorithm = Algorithm::kRing;
      config.timeout_seconds = 10;
      GroupConnection group(env, config, store);
      DistributedGradientSync sync(group.communicator(), syncOptionsOf(config));
      auto net = makeNet(1);
      const auto params = net->parameters();
      sync.attach(params);
      if (rank == 1) return;  // leaves: its connections close
      sync.beforeBackward(true);
      net->forward(torch::ones({2, kFeatures}), true).sum().backward();
      sync.afterBackward(true);
      try {
        sync.finish();
      } catch (const cumulus::CommError& e) {
        error = e.what();
        peer = e.peer();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("rank 0: %s\n", error.c_str());
  EXPECT_THAT(error, ::testing::HasSubstr("allreduce"));
  EXPECT_EQ(peer, 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 8.0);
}

}  // namespace
}  // namespace cumulus::distributed
