// comm.compression: bf16 in DistributedGradientSync, ranks as threads over real loopback: what the
// compressed all-reduce computes, what each rank keeps as its residual, and that error feedback
// loses nothing over many steps. The values are chosen so that every rounding can be checked by
// hand: bfloat16 keeps 8 significant bits, so its ulp in [1, 2) is 2^-7 and in [256, 512) is 2.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "comm/memory_store.h"
#include "comm/reduce.h"
#include "distributed/distributed_sync.h"
#include "distributed/group_connection.h"
#include "tests/distributed/thread_ranks.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {
namespace {

// Runs body(rank, sync, params) on `world` threads, each with its own ring group and a sync of
// bf16 buckets with error feedback over parameters shaped `shapes` (zeros; gradients are set by
// the body). Rethrows the first error.
void runRanks(int world, const std::vector<int64_t>& shapes,
              const std::function<void(int, distributed::DistributedGradientSync&,
                                       std::vector<torch::Tensor>&)>& body) {
  torch::set_num_threads(1);
  comm::MemoryStore store;
  distributed::runOnThreads(world, [&](int rank) {
    base::RunEnv env;
    env.rank = rank;
    env.world_size = world;
    GroupOptions group_options;
    group_options.algorithm = Algorithm::kRing;
    group_options.timeout_seconds = 20;
    distributed::GroupConnection group(env, group_options, store);
    distributed::DistributedSyncOptions sync_options;
    sync_options.algorithm = Algorithm::kRing;
    sync_options.compression = Compression::kBf16;
    sync_options.timeout = std::chrono::seconds(20);
    distributed::DistributedGradientSync sync(group.communicator(), sync_options);
    std::vector<torch::Tensor> params;
    for (const int64_t n : shapes) params.push_back(torch::zeros({n}, torch::requires_grad()));
    sync.attach(params);
    body(rank, sync, params);
  });
}

// One step whose gradients are set by hand: no hook hands them over, so finish() launches them.
void syncStep(distributed::DistributedGradientSync& sync, std::vector<torch::Tensor>& params,
              const std::vector<std::vector<float>>& grads) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) params[i].mutable_grad() = torch::zeros_like(params[i]);
    params[i].mutable_grad().copy_(torch::tensor(grads[i]));
  }
  sync.beforeBackward(true);
  sync.afterBackward(true);
  sync.finish();
}

std::vector<float> values(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

const float k2m9 = std::ldexp(1.0f, -9);
const float k2m8 = std::ldexp(1.0f, -8);
const float k2m7 = std::ldexp(1.0f, -7);
const float k2m6 = std::ldexp(1.0f, -6);

TEST(CompressionTest, SumsTheBf16RoundedGradientsAndKeepsWhatRoundingTookAsTheResidual) {
  // Parameter a (4 elements) and b (2); the bucket holds b first (reverse order), the residual is
  // in parameter order: a's four elements, then b's two.
  // rank 0, a: 1+2^-9 -> 1 (below half an ulp), residual 2^-9
  //            1+3·2^-9 -> 1+2^-7 (above half), residual -2^-9
  //            1+2^-8 -> 1 (a tie, to the even 1), residual 2^-8
  //            1+3·2^-8 -> 1+2^-6 (a tie, to the even 1+2^-6), residual -2^-8
  // rank 1, a: 2, 0.5, -1 (exact), 257 -> 256 (a tie, to the even 256), residual 1
  // sums (widened, added in float32, rounded once): 3, 1.5078125 (= 1+2^-7+0.5, exact), 0,
  //            256+1+2^-6 -> 258 (more than half of the ulp 2 above 256)
  // b: rank 0 1+2^-9 and 0.25, rank 1 1 and 0 -> sums 2 and 0.25, residuals 2^-9, 0 and 0, 0.
  const std::vector<std::vector<std::vector<float>>> grads = {
      {{1 + k2m9, 1 + 3 * k2m9, 1 + k2m8, 1 + 3 * k2m8}, {1 + k2m9, 0.25f}},
      {{2.0f, 0.5f, -1.0f, 257.0f}, {1.0f, 0.0f}}};
  const std::vector<std::vector<float>> residuals = {{k2m9, -k2m9, k2m8, -k2m8, k2m9, 0.0f},
                                                     {0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f}};
  std::vector<std::vector<float>> a_sums(2), b_sums(2), kept(2);
  runRanks(2, {4, 2}, [&](int rank, distributed::DistributedGradientSync& sync, auto& params) {
    ASSERT_EQ(sync.errorFeedbackNumel(), 6u);
    EXPECT_EQ(values(sync.errorFeedback()), std::vector<float>(6, 0.0f)) << "zero at attach";
    syncStep(sync, params, grads[rank]);
    a_sums[rank] = values(params[0].grad());
    b_sums[rank] = values(params[1].grad());
    kept[rank] = values(sync.errorFeedback());
    EXPECT_EQ(sync.lastStep().bytes, 6u * 2) << "2 bytes per element on the wire";
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(a_sums[rank], ::testing::ElementsAre(3.0f, 1 + k2m7 + 0.5f, 0.0f, 258.0f));
    EXPECT_THAT(b_sums[rank], ::testing::ElementsAre(2.0f, 0.25f));
    EXPECT_EQ(kept[rank], residuals[rank]) << "rank " << rank;
    // The residual is exactly g - bf16(g).
    std::vector<float> flat = grads[rank][0];
    flat.insert(flat.end(), grads[rank][1].begin(), grads[rank][1].end());
    for (size_t i = 0; i < flat.size(); ++i) {
      EXPECT_EQ(kept[rank][i], flat[i] - comm::bf16ToFloat(comm::floatToBf16(flat[i])))
          << "rank " << rank << " element " << i;
    }
  }
}

TEST(CompressionTest, ErrorFeedbackLosesNothingOverManySteps) {
  // Rank 0's constant gradient lies in [1, 2) and is mostly not a bf16 value; rank 1's is -1, so
  // each sum q - 1 is exact (Sterbenz) and what the test sees is rank 0's rounding alone. Without
  // error feedback every step would lose the same g - bf16(g), so after 40 steps up to
  // 40 · 2^-8 = 0.16; with it, the applied sum trails the true sum by the last residual alone,
  // less than half an ulp of g + e: at most 2^-7.
  constexpr int kSteps = 40;
  constexpr int64_t kN = 64;
  std::vector<float> g0(kN);
  for (int64_t i = 0; i < kN; ++i) g0[i] = 1.0f + static_cast<float>(i) / 67.0f;
  std::vector<double> applied(kN, 0.0);
  std::vector<float> last_residual;
  runRanks(2, {kN}, [&](int rank, distributed::DistributedGradientSync& sync, auto& params) {
    for (int step = 0; step < kSteps; ++step) {
      syncStep(sync, params, {rank == 0 ? g0 : std::vector<float>(kN, -1.0f)});
      if (rank == 0) {
        const std::vector<float> sum = values(params[0].grad());
        for (int64_t i = 0; i < kN; ++i) applied[i] += sum[i];
      }
    }
    if (rank == 0) last_residual = values(sync.errorFeedback());
  });
  double naive_worst = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const double truth = kSteps * (static_cast<double>(g0[i]) - 1.0);
    // Exactly: what was applied plus what rank 0 still holds is everything it was given.
    EXPECT_EQ(applied[i] + last_residual[i], truth) << "element " << i;
    EXPECT_LE(std::abs(applied[i] - truth), k2m7) << "element " << i;
    const double lost_per_step =
        g0[i] - static_cast<double>(comm::bf16ToFloat(comm::floatToBf16(g0[i])));
    naive_worst = std::max(naive_worst, std::abs(kSteps * lost_per_step));
  }
  EXPECT_GT(naive_worst, 10 * k2m7) << "the values must be ones plain rounding would drift on";
}

TEST(CompressionTest, SetErrorFeedbackRestoresResidualsAndRefusesAnotherSize) {
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> sums(2);
  runRanks(2, {3}, [&](int rank, distributed::DistributedGradientSync& sync, auto& params) {
    // A residual of 2^-8 on rank 0 tips 1+2^-8 (a tie that would round down to 1) up to 1+2^-7.
    sync.setErrorFeedback(torch::tensor({rank == 0 ? k2m8 : 0.0f, 0.0f, 0.0f}));
    syncStep(sync, params, {{1 + k2m8, 0.0f, 0.0f}});
    sums[rank] = values(params[0].grad());
    try {
      sync.setErrorFeedback(torch::zeros({4}));
    } catch (const std::invalid_argument& e) {
      errors[rank] = e.what();
    }
  });
  // 1+2^-7 (rank 0) + 1 (rank 1) = 2+2^-7 -> 2 (a tie at ulp 2^-6, to the even 2).
  EXPECT_THAT(sums[0], ::testing::ElementsAre(2.0f, 0.0f, 0.0f));
  EXPECT_EQ(errors[0],
            "setErrorFeedback: the residual has 4 elements, this model's 3 (float32 parameter "
            "elements)");
}

TEST(CompressionTest, ResidualsRoundTripThroughACheckpointAndKeepTheirSumOnAnotherWorld) {
  const torch::Tensor saved = torch::tensor({{k2m9, -k2m8, 0.5f}, {k2m8, k2m8, -0.25f}});
  const std::string dir = ::testing::TempDir() + "/compression_residuals_" +
                          std::to_string(::testing::UnitTest::GetInstance()->random_seed());
  std::filesystem::remove_all(dir);
  Checkpoint checkpoint;
  checkpoint.state.step = 3;
  checkpoint.tensors = {{"w", torch::zeros({3})}};
  checkpoint.optimizer_scalars = {{"name", std::string("sgd")}, {"step", int64_t{3}}};
  addResiduals(checkpoint, saved);
  Checkpoints checkpoints(dir);
  checkpoints.save(checkpoint);
  const std::string path = dir + "/" + Checkpoints::dirName(3);
  const torch::Tensor loaded = residualsOf(checkpoints.load(path), path);
  ASSERT_TRUE(loaded.defined());
  EXPECT_TRUE(loaded.equal(saved));

  std::string note;
  EXPECT_TRUE(residualForRank(loaded, 1, 2, &note).equal(saved[1])) << "same world: row r";
  EXPECT_EQ(note, "");
  // Three ranks now: rank 0 takes the rows' sum, the others zeros; the sum over ranks is kept.
  torch::Tensor total = torch::zeros({3});
  for (int rank = 0; rank < 3; ++rank) total += residualForRank(loaded, rank, 3, &note);
  EXPECT_TRUE(total.equal(saved.sum(0)));
  EXPECT_TRUE(residualForRank(loaded, 2, 3, nullptr).equal(torch::zeros({3})));
  EXPECT_EQ(note,
            "comm.compression: the checkpoint's error-feedback residuals of 2 ranks are summed "
            "into rank 0's for 3 ranks (the others start at zero)");
  EXPECT_FALSE(residualsOf(Checkpoint{}, path).defined()) << "none saved: none";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cumulus::trainer
