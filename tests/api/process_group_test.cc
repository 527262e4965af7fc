// ProcessGroup (<cumulus/process_group.h>): a group of one from an empty environment, the
// environment's and the options' errors, and every collective's answer over 2-3 ranks as threads.

#include "cumulus/process_group.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <future>
#include <map>
#include <set>
#include <string>

#include "api/testing.h"
#include "cumulus/preemption.h"
#include "ranks.h"

namespace cumulus {
namespace {

using testing::groupFromVariables;
using testing::runRanks;

std::string groupErrorOf(const std::map<std::string, std::string>& variables,
                         const GroupOptions& options = {}) {
  try {
    groupFromVariables(variables, options);
  } catch (const GroupError& e) {
    return e.what();
  }
  return "no GroupError";
}

template <typename Fn>
std::string invalidArgumentOf(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no std::invalid_argument";
}

TEST(ProcessGroupAlone, EmptyEnvironmentIsAGroupOfOne) {
  const auto group = groupFromVariables({});
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->localRank(), 0);
  EXPECT_EQ(group->localSize(), 1);
  EXPECT_EQ(group->generation(), 0u);
  EXPECT_EQ(group->restartCount(), 0);
  EXPECT_EQ(group->runId(), "");
  EXPECT_FALSE(group->underLauncher());
  EXPECT_EQ(group->options().algorithm, Algorithm::kAuto);
  EXPECT_EQ(group->impl().communicator(), nullptr);

  torch::Tensor t = torch::tensor({1.5f, -2.0f, 3.0f});
  group->allreduce(t);
  EXPECT_TRUE(torch::equal(t, torch::tensor({1.5f, -2.0f, 3.0f})));
  CollectiveOptions avg;
  avg.op = ReduceOp::kAvg;
  group->allreduce(t, avg);
  EXPECT_TRUE(torch::equal(t, torch::tensor({1.5f, -2.0f, 3.0f})));
  group->broadcast(t, 0);
  EXPECT_TRUE(torch::equal(t, torch::tensor({1.5f, -2.0f, 3.0f})));
  const torch::Tensor gathered = group->allgather(t);
  EXPECT_EQ(gathered.sizes(), (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(torch::equal(gathered[0], t));
  EXPECT_TRUE(torch::equal(group->reduceScatter(t), t));
  group->barrier();
  EXPECT_EQ(invalidArgumentOf([&] { group->broadcast(t, 1); }),
            "broadcast: root 1 must be in [0, 1)");
  EXPECT_EQ(group->bytesSent(), 0u) << "a group of one sends nothing";
}

TEST(ProcessGroupAlone, LauncherVariablesAreReported) {
  const auto group = groupFromVariables({{"RANK", "0"},
                                         {"WORLD_SIZE", "1"},
                                         {"CUMULUS_RUN_ID", "run-7"},
                                         {"CUMULUS_GENERATION", "3"},
                                         {"CUMULUS_RESTART_COUNT", "2"}});
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->runId(), "run-7");
  EXPECT_TRUE(group->underLauncher());
  EXPECT_EQ(group->generation(), 3u);
  EXPECT_EQ(group->restartCount(), 2);
}

TEST(ProcessGroupErrors, BadEnvironmentIsAGroupError) {
  EXPECT_EQ(groupErrorOf({{"RANK", "3"}, {"WORLD_SIZE", "2"}}),
            "RANK=3 must be in [0, WORLD_SIZE=2)");
  EXPECT_EQ(groupErrorOf({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
            "environment variable RANK=\"x\" is not an integer");
  EXPECT_EQ(groupErrorOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}}),
            "MASTER_ADDR is not set: a worker of a group needs RANK, WORLD_SIZE, MASTER_ADDR and "
            "MASTER_PORT (start it with cumulus-run)");
}

TEST(ProcessGroupErrors, BadOptionsAreGroupErrors) {
  GroupOptions options;
  options.algorithm = Algorithm::kTree;
  options.timeout_seconds = 0;
  EXPECT_EQ(groupErrorOf({}, options),
            "timeout_seconds: must be a positive number of seconds, got 0.000000");
}

TEST(ProcessGroupErrors, TensorsMustBeCpuOfAKnownDtype) {
  const auto group = groupFromVariables({});
  torch::Tensor meta = torch::empty({2}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_EQ(invalidArgumentOf([&] { group->allreduce(meta); }),
            "allreduce: the tensor is on meta; collectives take CPU tensors (move it with .cpu())");
  torch::Tensor bytes = torch::zeros({2}, torch::kUInt8);
  EXPECT_EQ(invalidArgumentOf([&] { group->broadcast(bytes); }),
            "broadcast: a tensor of dtype Byte cannot take part (float32, float64, bfloat16, "
            "float16, int32 and int64 can)");
}

// Rank r's tensor: base * (r + 1), so the sum over 3 ranks is 6 * base and the max 3 * base.
TEST(ProcessGroupCollectives, AllreduceSumMaxAvgOverThreeRanks) {
  runRanks(3, [](ProcessGroup& group) {
    const double scale = group.rank() + 1;
    torch::Tensor f32 = torch::tensor({1.0f, -2.0f, 0.5f}) * scale;
    group.allreduce(f32);
    EXPECT_TRUE(torch::equal(f32, torch::tensor({6.0f, -12.0f, 3.0f})));

    torch::Tensor f64 = torch::tensor({0.25, 1e10, -3.0}, torch::kFloat64) * scale;
    CollectiveOptions max;
    max.op = ReduceOp::kMax;
    group.allreduce(f64, max);
    EXPECT_TRUE(torch::equal(f64, torch::tensor({0.75, 3e10, -3.0}, torch::kFloat64)));

    torch::Tensor i64 =
        torch::tensor({int64_t{1} << 40, int64_t{-7}}, torch::kInt64) * static_cast<int64_t>(scale);
    group.allreduce(i64);
    EXPECT_TRUE(torch::equal(i64, torch::tensor({int64_t{6} << 40, int64_t{-42}}, torch::kInt64)));

    torch::Tensor avg = torch::tensor({3.0, 6.0}, torch::kFloat64) * scale;
    CollectiveOptions mean;
    mean.op = ReduceOp::kAvg;
    mean.algorithm = Algorithm::kTree;
    group.allreduce(avg, mean);
    EXPECT_TRUE(torch::equal(avg, torch::tensor({6.0, 12.0}, torch::kFloat64)));
  });
}

TEST(ProcessGroupCollectives, ProductAndBitwiseOpsOverThreeRanks) {
  runRanks(3, [](ProcessGroup& group) {
    const int64_t r = group.rank();
    torch::Tensor f32 = torch::tensor({1.5f, -1.0f}) * static_cast<float>(r + 1);
    CollectiveOptions product;
    product.op = ReduceOp::kProduct;
    group.allreduce(f32, product);
    EXPECT_TRUE(torch::equal(f32, torch::tensor({1.5f * 3.0f * 4.5f, -6.0f})));  // 1.5·3·4.5

    torch::Tensor bits = torch::tensor({int32_t{1} << r, int32_t{0b111}}, torch::kInt32);
    CollectiveOptions bor;
    bor.op = ReduceOp::kBor;
    group.allreduce(bits, bor);
    EXPECT_TRUE(torch::equal(bits, torch::tensor({0b111, 0b111}, torch::kInt32)));
    torch::Tensor mixed = torch::tensor({int64_t{6} + r}, torch::kInt64);  // 6, 7, 8
    CollectiveOptions bxor;
    bxor.op = ReduceOp::kBxor;
    group.allreduce(mixed, bxor);
    EXPECT_EQ(mixed.item<int64_t>(), 6 ^ 7 ^ 8);

    torch::Tensor floats = torch::ones({2});
    CollectiveOptions band;
    band.op = ReduceOp::kBand;
    EXPECT_EQ(invalidArgumentOf([&] { group.allreduce(floats, band); }),
              "allreduce: the bitwise op band needs an integer dtype (int32 or int64), not "
              "float32");
  });
}

// A ring all-reduce of 1000 float32 at size 2: each rank sends its half of the buffer in the
// reduce-scatter and again in the all-gather, 2 messages of 2000 bytes, each behind a 32-byte
// frame header. bytesSent() is cumulative: a second one doubles it.
TEST(ProcessGroupCollectives, BytesSentIsWhatTheCollectivesHandedToTheTransport) {
  runRanks(2, [](ProcessGroup& group) {
    EXPECT_EQ(group.bytesSent(), 0u);
    torch::Tensor t = torch::ones({1000});
    CollectiveOptions ring;
    ring.algorithm = Algorithm::kRing;
    group.allreduce(t, ring);
    EXPECT_EQ(group.bytesSent(), 2u * (2000 + 32));
    group.allreduceAsync(t, ring)->wait();
    EXPECT_EQ(group.bytesSent(), 2u * 2u * (2000 + 32));
  });
}

TEST(ProcessGroupCollectives, NonContiguousTensorIsReducedInPlace) {
  runRanks(2, [](ProcessGroup& group) {
    // A transposed view of a 2x3 storage: written back through the view.
    torch::Tensor storage = torch::arange(6, torch::kFloat32).reshape({2, 3}) * (group.rank() + 1);
    torch::Tensor view = storage.t();
    ASSERT_FALSE(view.is_contiguous());
    group.allreduce(view);
    EXPECT_TRUE(torch::equal(storage, torch::arange(6, torch::kFloat32).reshape({2, 3}) * 3));
  });
}

TEST(ProcessGroupCollectives, BroadcastFromRootOne) {
  runRanks(3, [](ProcessGroup& group) {
    torch::Tensor t = torch::full({4}, group.rank() * 10, torch::kInt32);
    group.broadcast(t, 1);
    EXPECT_TRUE(torch::equal(t, torch::full({4}, 10, torch::kInt32)));
    EXPECT_EQ(invalidArgumentOf([&] { group.broadcast(t, 3); }),
              "broadcast: root 3 must be in [0, 3)");
  });
}

// Several collectives in flight at once, waited for together: the results are those of the
// blocking calls, a non-contiguous tensor gets its result at wait(), and a Work nobody waited for
// still finishes before its destructor returns.
TEST(ProcessGroupCollectives, AsyncCollectivesCompleteInCallOrder) {
  runRanks(3, [](ProcessGroup& group) {
    const int r = group.rank();
    torch::Tensor sum = torch::full({1000}, r + 1.0, torch::kFloat64);
    torch::Tensor strided = torch::full({4, 2}, r + 1.0f).t();  // non-contiguous
    torch::Tensor root = torch::full({3}, r * 10, torch::kInt64);
    std::unique_ptr<Work> w1 = group.allreduceAsync(sum);
    std::unique_ptr<Work> w2 = group.allreduceAsync(strided);
    std::unique_ptr<Work> w3 = group.broadcastAsync(root, 2);
    w3->wait();
    EXPECT_TRUE(w3->isCompleted());
    EXPECT_TRUE(torch::equal(root, torch::full({3}, 20, torch::kInt64)));
    w2->wait();
    EXPECT_TRUE(torch::equal(strided, torch::full({2, 4}, 6.0f)));
    w1.reset();  // the destructor waits
    EXPECT_TRUE(torch::equal(sum, torch::full({1000}, 6.0, torch::kFloat64)));
    w2->wait();  // a second wait returns at once
    EXPECT_EQ(invalidArgumentOf([&] { group.broadcastAsync(root, -1); }),
              "broadcast: root -1 must be in [0, 3)");
  });
}

TEST(ProcessGroupAlone, AsyncWorkIsCompleteAtOnce) {
  const auto group = groupFromVariables({});
  torch::Tensor t = torch::tensor({1.5f, 2.5f});
  std::unique_ptr<Work> work = group->allreduceAsync(t);
  EXPECT_TRUE(work->isCompleted());
  work->wait();
  EXPECT_TRUE(torch::equal(t, torch::tensor({1.5f, 2.5f})));
}

TEST(ProcessGroupCollectives, AllgatherStacksRanksInOrder) {
  runRanks(3, [](ProcessGroup& group) {
    const int64_t r = group.rank();
    const torch::Tensor mine = torch::tensor({r, r * 10}, torch::kInt64);
    const torch::Tensor all = group.allgather(mine);
    EXPECT_TRUE(torch::equal(all, torch::tensor({0, 0, 1, 10, 2, 20}, torch::kInt64).view({3, 2})));
  });
}

TEST(ProcessGroupCollectives, ReduceScatterGivesEachRankItsRows) {
  runRanks(3, [](ProcessGroup& group) {
    const torch::Tensor input =
        torch::arange(12, torch::kFloat64).reshape({6, 2}) * (group.rank() + 1);
    const torch::Tensor block = group.reduceScatter(input);
    const torch::Tensor sum = torch::arange(12, torch::kFloat64).reshape({6, 2}) * 6;
    EXPECT_TRUE(torch::equal(block, sum.slice(0, 2 * group.rank(), 2 * group.rank() + 2)));
    EXPECT_EQ(invalidArgumentOf([&] {
                group.reduceScatter(torch::zeros({5, 2}));
              }),
              "reduceScatter: the first dimension (5) must be a multiple of the group's size 3");
    group.barrier();
  });
}

TEST(ProcessGroupCollectives, ReduceLeavesTheOthersAsTheyWere) {
  runRanks(3, [](ProcessGroup& group) {
    torch::Tensor t = torch::tensor({1, -2, 3}, torch::kInt32) * (group.rank() + 1);
    const torch::Tensor before = t.clone();
    group.reduce(t, 2);
    EXPECT_TRUE(
        torch::equal(t, group.rank() == 2 ? torch::tensor({6, -12, 18}, torch::kInt32) : before));
  });
}

// Gather and scatter move bytes: a bool tensor goes as it is.
TEST(ProcessGroupCollectives, GatherAndScatterTakeAnyDtype) {
  runRanks(3, [](ProcessGroup& group) {
    const int r = group.rank();
    const torch::Tensor mine = torch::tensor({r == 0, r == 1, true});
    torch::Tensor all = torch::zeros({3, 3}, torch::kBool);
    group.gather(mine, r == 1 ? &all : nullptr, 1);
    if (r == 1) {
      EXPECT_TRUE(torch::equal(
          all, torch::eye(3, torch::kBool).logical_or(torch::tensor({false, false, true}))));
    }
    const torch::Tensor blocks = torch::arange(6, torch::kInt16).reshape({3, 2}) + 100;
    torch::Tensor got = torch::zeros({2}, torch::kInt16);
    group.scatter(r == 0 ? &blocks : nullptr, got, 0);
    EXPECT_TRUE(torch::equal(got, blocks[r]));
    EXPECT_EQ(invalidArgumentOf([&] { group.gather(mine, nullptr, r); }),
              "gather: the root needs an output tensor");
    group.barrier();
  });
}

// all_to_all_single's contract: rows of the first dimension, by splits or evenly.
TEST(ProcessGroupCollectives, AllToAllCutsTheFirstDimensionBySplits) {
  runRanks(3, [](ProcessGroup& group) {
    const int64_t r = group.rank();
    // Rank r sends r + 1 rows to everyone; row values say who sent them to whom.
    std::vector<torch::Tensor> blocks;
    for (int64_t j = 0; j < 3; ++j) blocks.push_back(torch::full({r + 1, 2}, r * 10 + j));
    torch::Tensor out = torch::zeros({6, 2}, torch::kFloat32);
    group.allToAll(torch::cat(blocks).to(torch::kFloat32), out, {r + 1, r + 1, r + 1}, {1, 2, 3});
    std::vector<torch::Tensor> want;
    for (int64_t j = 0; j < 3; ++j) want.push_back(torch::full({j + 1, 2}, float(j * 10 + r)));
    EXPECT_TRUE(torch::equal(out, torch::cat(want)));
    torch::Tensor even = torch::zeros({3}, torch::kInt64);
    group.allToAll(torch::tensor({r * 10, r * 10 + 1, r * 10 + 2}), even);
    EXPECT_TRUE(torch::equal(even, torch::tensor({r, 10 + r, 20 + r})));
    EXPECT_EQ(invalidArgumentOf([&] { group.allToAll(torch::zeros({4}), out); }),
              "allToAll: the input's first dimension (4) is not a multiple of the group's 3 "
              "ranks; pass its splits");
    group.barrier();
  });
}

// Every rank sends to every other first and receives after: no deadlock, every message whole;
// then rank 0 takes one message from whoever sends first, twice.
TEST(ProcessGroupPointToPoint, SendsAndReceivesInAnyOrder) {
  runRanks(3, [](ProcessGroup& group) {
    const int r = group.rank();
    std::vector<std::unique_ptr<Work>> sends;
    std::vector<torch::Tensor> outgoing;
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      outgoing.push_back(torch::full({1 << 18}, float(r * 3 + peer)));
      sends.push_back(group.sendAsync(outgoing.back(), peer, 5));
    }
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      torch::Tensor got = torch::zeros({1 << 18});
      auto work = group.recvAsync(got, peer, 5);
      work->wait();
      EXPECT_EQ(work->source(), peer);
      EXPECT_TRUE(torch::equal(got, torch::full({1 << 18}, float(peer * 3 + r))));
    }
    for (auto& s : sends) s->wait();
    if (r != 0) {
      group.sendAsync(torch::tensor({int64_t{r}}), 0, 8)->wait();
      return;
    }
    std::set<int> sources;
    for (int i = 0; i < 2; ++i) {
      torch::Tensor got = torch::zeros({1}, torch::kInt64);
      auto work = group.recvAsync(got, ProcessGroup::kAnySource, 8);
      work->wait();
      EXPECT_EQ(got.item<int64_t>(), work->source());
      sources.insert(work->source());
    }
    EXPECT_EQ(sources, (std::set<int>{1, 2}));
    torch::Tensor t = torch::zeros({1});
    EXPECT_EQ(invalidArgumentOf([&] { group.recvAsync(t, 0); }),
              "recv: rank 0 is this rank itself");
    EXPECT_EQ(invalidArgumentOf([&] { group.sendAsync(t, 3); }), "send: rank 3 is not in [0, 3)");
  });
}

// A non-contiguous tensor receives through a copy, written back by wait().
TEST(ProcessGroupPointToPoint, ANonContiguousTensorReceivesInPlace) {
  runRanks(2, [](ProcessGroup& group) {
    torch::Tensor grid = torch::zeros({3, 4});
    if (group.rank() == 0) {
      group.sendAsync(torch::tensor({1.0f, 2.0f, 3.0f}), 1)->wait();
      return;
    }
    torch::Tensor column = grid.select(1, 2);
    group.recvAsync(column, 0)->wait();
    EXPECT_TRUE(torch::equal(grid.select(1, 2), torch::tensor({1.0f, 2.0f, 3.0f})));
    EXPECT_EQ(grid.sum().item<float>(), 6.0f);
  });
}

// wait(timeout) gives up on a receive that has not arrived, which goes on; a later wait() takes
// the message (into a non-contiguous tensor too, through its copy).
TEST(ProcessGroupPointToPoint, AWaitThatRunsOutLeavesTheReceivePosted) {
  runRanks(2, [](ProcessGroup& group) {
    if (group.rank() == 0) {
      group.barrier();  // rank 1's first wait has run out
      group.sendAsync(torch::tensor({4.0f, 5.0f}), 1, 3)->wait();
      return;
    }
    torch::Tensor grid = torch::zeros({2, 2});
    torch::Tensor column = grid.select(1, 0);
    auto work = group.recvAsync(column, 0, 3);
    try {
      work->wait(std::chrono::milliseconds(50));
      ADD_FAILURE() << "a receive nothing was sent to completed";
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), CommErrorKind::kTimeout);
      EXPECT_EQ(std::string(e.what()), "recv seq " + std::to_string(e.seq()) +
                                           ": timeout: not finished after waiting 50 ms");
    }
    EXPECT_FALSE(work->isCompleted());
    group.barrier();
    work->wait(std::chrono::seconds(60));
    EXPECT_TRUE(torch::equal(grid.select(1, 0), torch::tensor({4.0f, 5.0f})));
    EXPECT_EQ(work->source(), 0);
  });
}

TEST(ProcessGroupPointToPoint, AGroupWithoutLanesOrAloneSaysSo) {
  GroupOptions without;
  without.point_to_point = false;
  runRanks(
      2,
      [](ProcessGroup& group) {
        torch::Tensor t = torch::zeros({1});
        EXPECT_EQ(invalidArgumentOf([&] { group.sendAsync(t, 1 - group.rank()); }),
                  "send: this group was made without point-to-point lanes "
                  "(GroupOptions::point_to_point)");
      },
      without);
  auto alone = groupFromVariables({});
  torch::Tensor t = torch::zeros({1});
  EXPECT_EQ(invalidArgumentOf([&] { alone->recvAsync(t, ProcessGroup::kAnySource); }),
            "recv: a group of one has no peer");
}

TEST(AgreeOver, MaxOverRanksAndIdentityAlone) {
  runRanks(3, [](ProcessGroup& group) {
    const AgreeMax agree = agreeOver(group);
    EXPECT_EQ(agree(group.rank() == 1 ? 41 : -1), 41);
    EXPECT_EQ(agree(-1), -1);
  });
  const auto alone = testing::groupFromVariables({});
  EXPECT_EQ(agreeOver(*alone)(7), 7);
}

// Rank 1 leaves (destroys its group) after a barrier; rank 0's next allreduce then fails with the
// peer to blame, and the broken group fails every later call at once.
TEST(ProcessGroupFailure, PeerThatLeavesSurfacesAsCommError) {
  std::promise<void> left;
  std::shared_future<void> rank1_left = left.get_future().share();
  GroupOptions options = testing::testGroupOptions(Algorithm::kTree);
  options.timeout_seconds = 5;
  comm::MemoryStore store;
  auto rank = [&](int r) {
    base::RunEnv env;
    env.rank = r;
    env.world_size = 2;
    env.job_token = "api-test-token";
    return testing::groupOverStore(env, store, options);
  };
  std::thread peer([&] {
    std::unique_ptr<ProcessGroup> group = rank(1);
    group->barrier();
    group.reset();
    left.set_value();
  });
  std::unique_ptr<ProcessGroup> group = rank(0);
  group->barrier();
  rank1_left.wait();
  torch::Tensor t = torch::ones({16});
  // Started in the background; the failure comes out of wait(), typed, and again from a second
  // wait().
  std::unique_ptr<Work> work = group->allreduceAsync(t);
  try {
    work->wait();
    ADD_FAILURE() << "allreduce with a peer gone did not throw";
  } catch (const CommError& e) {
    EXPECT_TRUE(e.kind() == CommErrorKind::kPeerClosed || e.kind() == CommErrorKind::kTimeout)
        << e.what();
    EXPECT_EQ(e.op(), "allreduce");
    EXPECT_EQ(e.peer(), 1);
  }
  EXPECT_TRUE(work->isCompleted());
  EXPECT_THROW(work->wait(), CommError);
  // The group is broken: the blocking calls throw at once.
  EXPECT_THROW(group->allreduce(t), CommError);
  EXPECT_THROW(group->barrier(), CommError);
  peer.join();
}

}  // namespace
}  // namespace cumulus
