// DataParallel (<cumulus/data_parallel.h>) over 2 ranks as threads: replicas start from rank 0's
// values, and the summed gradients of sum-normalized losses equal one process's gradient of the
// whole batch.

#include "cumulus/data_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "api/testing.h"
#include "ranks.h"

namespace cumulus {
namespace {

constexpr int64_t kBatch = 8;

struct Batch {
  torch::Tensor x, y;
};

Batch makeBatch() {
  torch::manual_seed(7);
  return {torch::randn({kBatch, 4}, torch::kFloat64), torch::randn({kBatch, 3}, torch::kFloat64)};
}

torch::nn::Linear makeLinear(uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Linear net(4, 3);
  net->to(torch::kFloat64);
  return net;
}

// The loss the header prescribes: the sum of the rows' losses over the global batch size.
torch::Tensor lossOf(torch::nn::Linear& net, const torch::Tensor& x, const torch::Tensor& y) {
  return (net->forward(x) - y).pow(2).sum() / static_cast<double>(kBatch);
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

TEST(DataParallel, TwoRanksGiveTheWholeBatchGradient) {
  const Batch batch = makeBatch();
  // One process, the whole batch, from rank 0's initial values.
  torch::nn::Linear reference = makeLinear(100);
  const std::vector<torch::Tensor> initial = clones(reference->parameters());
  lossOf(reference, batch.x, batch.y).backward();

  std::vector<std::vector<torch::Tensor>> after_attach(2), grads(2);
  std::vector<std::vector<size_t>> buckets(2);
  std::vector<SyncStepStats> stats(2);
  std::vector<std::vector<BucketEvent>> events(2);  // each rank's observer runs on its own thread
  // Built here: torch's generator is process-wide. Rank 1 starts elsewhere.
  std::vector<torch::nn::Linear> nets{makeLinear(100), makeLinear(101)};
  ASSERT_FALSE(torch::equal(nets[1]->weight, initial[0]));
  testing::runRanks(2, [&](ProcessGroup& group) {
    const int r = group.rank();
    torch::nn::Linear& net = nets[r];
    DataParallelOptions options;
    options.on_bucket_done = [&events, r](const BucketEvent& e) { events[r].push_back(e); };
    DataParallel sync(group, options);
    sync.attach(net->parameters());
    after_attach[r] = clones(net->parameters());
    const int64_t begin = kBatch * r / 2, end = kBatch * (r + 1) / 2;
    sync.backward(lossOf(net, batch.x.slice(0, begin, end), batch.y.slice(0, begin, end)));
    for (const auto& p : net->parameters()) grads[r].push_back(p.grad().clone());
    buckets[r] = sync.bucketBytes();
    stats[r] = sync.lastStep();
  });

  const std::vector<torch::Tensor> expected = reference->parameters();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(after_attach[r].size(), 2u);
    ASSERT_EQ(grads[r].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(torch::equal(after_attach[r][i], initial[i])) << "rank " << r << " param " << i;
      EXPECT_TRUE(torch::allclose(grads[r][i], expected[i].grad(), 1e-12, 1e-12))
          << "rank " << r << " param " << i << "\n"
          << grads[r][i] << "\n"
          << expected[i].grad();
    }
    // Both gradients (12 + 3 doubles) fit the first 1 MiB bucket.
    EXPECT_EQ(buckets[r], (std::vector<size_t>{120}));
    EXPECT_EQ(stats[r].buckets, 1u);
    EXPECT_EQ(stats[r].bytes, 120u);
    // The observer heard of the one bucket before backward() returned.
    ASSERT_EQ(events[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(events[r][0].bucket, 0u);
    EXPECT_EQ(events[r][0].bytes, 120u);
    EXPECT_EQ(events[r][0].params, 2u);
    EXPECT_FALSE(events[r][0].failed);
  }
  // The ranks agree bit for bit.
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i]));
}

// Three SGD steps over 2 ranks end where one process ends on the whole batch, in both modes: by
// default the program zeroes with LibTorch's own Optimizer::zero_grad() (which detaches each
// gradient in place); with gradient_as_bucket_view the gradients are views and zeroGrad() zeroes.
void trainThreeSteps(bool as_view) {
  const Batch batch = makeBatch();
  torch::nn::Linear reference = makeLinear(100);
  torch::optim::SGD reference_sgd(reference->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    reference_sgd.zero_grad();
    lossOf(reference, batch.x, batch.y).backward();
    reference_sgd.step();
  }
  std::vector<torch::nn::Linear> nets{makeLinear(100), makeLinear(101)};
  std::vector<std::vector<torch::Tensor>> trained(2);
  testing::runRanks(2, [&](ProcessGroup& group) {
    const int r = group.rank();
    torch::nn::Linear& net = nets[r];
    DataParallelOptions options;
    options.gradient_as_bucket_view = as_view;
    DataParallel sync(group, options);
    sync.attach(net->parameters());
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
    const int64_t begin = kBatch * r / 2, end = kBatch * (r + 1) / 2;
    for (int step = 0; step < 3; ++step) {
      if (as_view) {
        sync.zeroGrad();
      } else {
        sgd.zero_grad();
      }
      sync.backward(lossOf(net, batch.x.slice(0, begin, end), batch.y.slice(0, begin, end)));
      sgd.step();
    }
    trained[r] = clones(net->parameters());
  });
  const std::vector<torch::Tensor> expected = reference->parameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(trained[0][i], trained[1][i])) << "param " << i;
    EXPECT_TRUE(torch::allclose(trained[0][i], expected[i], 1e-12, 1e-12)) << "param " << i;
  }
}

TEST(DataParallel, OptimizerZeroGradWorksByDefault) { trainThreeSteps(false); }

TEST(DataParallel, ZeroGradZeroesBucketViews) { trainThreeSteps(true); }

TEST(DataParallel, BroadcastCopiesRankZerosBuffers) {
  testing::runRanks(2, [](ProcessGroup& group) {
    DataParallel sync(group);
    torch::Tensor buffer = torch::full({3}, group.rank() + 5, torch::kInt64);
    torch::Tensor strided = torch::full({2, 2}, group.rank() + 0.5).t();
    sync.broadcast({buffer, strided});
    EXPECT_TRUE(torch::equal(buffer, torch::full({3}, 5, torch::kInt64)));
    EXPECT_TRUE(torch::equal(strided, torch::full({2, 2}, 0.5)));
  });
}

// Buffers given to attach: rank 0's at attach; after each step's finish(), every rank holds their
// average over the ranks as the step's forward left them (here: set by hand before backward),
// float32 and int64 each in their own dtype, integers floored; a bool mask keeps rank 0's.
TEST(DataParallel, BuffersAreRankZerosAtAttachThenTheirAverageAtEveryStep) {
  testing::runRanks(3, [](ProcessGroup& group) {
    torch::manual_seed(3);
    torch::nn::Linear net(2, 1);
    torch::Tensor mean = torch::full({2}, 10.0f * static_cast<float>(group.rank() + 1));
    torch::Tensor count = torch::full({1}, group.rank() + 4, torch::kInt64);
    torch::Tensor mask = torch::full({2}, group.rank() == 0, torch::kBool);
    DataParallel sync(group);
    sync.attach(net->parameters(), {mean, count, mask});
    EXPECT_TRUE(torch::equal(mean, torch::full({2}, 10.0f)));
    EXPECT_TRUE(torch::equal(count, torch::full({1}, 4, torch::kInt64)));
    EXPECT_TRUE(torch::equal(mask, torch::full({2}, true, torch::kBool)));
    for (int step = 0; step < 2; ++step) {
      // What each rank's forward would leave: its own statistics.
      mean.fill_(0.5f * static_cast<float>(group.rank()) + static_cast<float>(step));
      count.fill_(group.rank() + 7);           // 7, 8, 9: the average 8
      if (group.rank() == 2) count.fill_(10);  // 7, 8, 10: 25 / 3, floored to 8
      const torch::Tensor x = torch::ones({1, 2});
      sync.backward(net->forward(x).sum());
      // (0 + 0.5 + 1) / 3 + step, the same bits on every rank.
      EXPECT_TRUE(torch::equal(mean, torch::full({2}, 1.5f / 3.0f + static_cast<float>(step))))
          << mean;
      EXPECT_TRUE(torch::equal(count, torch::full({1}, 8, torch::kInt64))) << count;
      EXPECT_TRUE(torch::equal(mask, torch::full({2}, true, torch::kBool)));
    }
  });
}

TEST(DataParallel, ABufferListThatDiffersBetweenRanksIsRefused) {
  testing::runRanks(2, [](ProcessGroup& group) {
    torch::nn::Linear net(2, 1);
    DataParallel sync(group);
    const torch::Tensor buffer = torch::zeros({group.rank() + 1});
    try {
      sync.attach(net->parameters(), {buffer});
      ADD_FAILURE() << "attach accepted buffers of different shapes";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "rank 1's buffers differ from rank 0's (shapes or dtypes): every rank must build "
                "the same model");
    }
  });
}

TEST(DataParallel, AloneTheLocalGradientIsKept) {
  const auto group = testing::groupFromVariables({});
  const Batch batch = makeBatch();
  torch::nn::Linear net = makeLinear(3);
  torch::nn::Linear reference = makeLinear(3);
  DataParallel sync(*group);
  sync.attach(net->parameters());
  sync.backward(lossOf(net, batch.x, batch.y));
  lossOf(reference, batch.x, batch.y).backward();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(torch::equal(net->parameters()[i].grad(), reference->parameters()[i].grad()));
  }
  EXPECT_TRUE(sync.bucketBytes().empty());
  EXPECT_EQ(sync.lastStep().buckets, 0u);
}

TEST(DataParallel, BadOptionIsAGroupError) {
  const auto group = testing::groupFromVariables({});
  DataParallelOptions options;
  options.bucket_cap_mb = 0;
  try {
    DataParallel sync(*group, options);
    ADD_FAILURE() << "no GroupError";
  } catch (const GroupError& e) {
    EXPECT_STREQ(e.what(), "bucket_cap_mb: must be a positive number of MiB, got 0.000000");
  }
}

TEST(DataParallel, AloneCompressionKeepsNoResidual) {
  const auto group = testing::groupFromVariables({});
  DataParallelOptions options;
  options.compression = Compression::kBf16;
  DataParallel sync(*group, options);
  torch::nn::Linear net = makeLinear(3);
  sync.attach(net->parameters());
  EXPECT_EQ(sync.errorFeedback().numel(), 0);
  try {
    sync.setErrorFeedback(torch::zeros({3}));
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "setErrorFeedback: a group of one sends nothing and keeps no residual");
  }
}

}  // namespace
}  // namespace cumulus
