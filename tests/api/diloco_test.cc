// DiLoCo (<cumulus/diloco.h>) with ranks as threads: the fragments, the outer update against
// hand-computed numbers, a dead worker's round dropped from the average, a failed sync that
// changes nothing, int8 error feedback over many rounds, and overlap landing the same update.

#include "cumulus/diloco.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cumulus/data_parallel.h"
#include "cumulus/errors.h"
#include "cumulus/process_group.h"
#include "tests/api/ranks.h"

namespace cumulus {
namespace {

using testing::runRanks;

std::vector<torch::Tensor> tensorsOf(const std::vector<int64_t>& sizes, float value) {
  std::vector<torch::Tensor> out;
  for (int64_t n : sizes) out.push_back(torch::full({n}, value));
  return out;
}

// Exact in float32: outer lr 0.5, momentum 0.5, Nesterov.
DiLoCoOptions dyadic(int64_t inner_steps) {
  DiLoCoOptions o;
  o.inner_steps = inner_steps;
  o.outer_lr = 0.5;
  o.outer_momentum = 0.5;
  return o;
}

void moveBy(std::vector<torch::Tensor>& params, float amount) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : params) p.sub_(amount);
}

TEST(DiLoCoTest, FragmentsCoverEveryParameterExactlyOnceEachAtAStepOfItsOwn) {
  const std::vector<int64_t> sizes = {10, 3, 100, 1, 50, 7, 64};
  for (int64_t f = 1; f <= 7; ++f) {
    SCOPED_TRACE("fragments " + std::to_string(f));
    DiLoCoOptions options;
    options.inner_steps = 12;
    options.fragments = f;
    DiLoCo diloco(tensorsOf(sizes, 1), options);
    ASSERT_EQ(diloco.fragments().size(), static_cast<size_t>(f));
    size_t next = 0;
    for (const auto& fragment : diloco.fragments()) {
      ASSERT_FALSE(fragment.empty());
      for (size_t index : fragment) EXPECT_EQ(index, next++);  // in order, each once
    }
    EXPECT_EQ(next, sizes.size());
    std::vector<int> syncs(static_cast<size_t>(f), 0);
    for (int64_t step = 0; step <= 24; ++step) {
      const int due = diloco.dueAt(step);
      if (due >= 0) ++syncs[static_cast<size_t>(due)];
    }
    for (int count : syncs) EXPECT_EQ(count, 2);  // each fragment twice in 2 rounds
  }
  DiLoCoOptions plain;
  plain.inner_steps = 12;
  DiLoCo one(tensorsOf(sizes, 1), plain);
  for (int64_t step = 0; step <= 36; ++step) {
    EXPECT_EQ(one.dueAt(step), step > 0 && step % 12 == 0 ? 0 : -1) << step;
  }
}

// Two workers, H = 3: rank 0 moves every value down by 0.25 each inner step, rank 1 by 0.5.
// Round 1: outer gradient 1.125 (the mean of 0.75 and 1.5), momentum 1.125, Nesterov step
// 1.125 + 0.5 x 1.125 = 1.6875, times lr 0.5: 1 -> 0.15625. Round 2: momentum 0.5 x 1.125 + 1.125
// = 1.6875, step 1.125 + 0.5 x 1.6875 = 1.96875, x 0.5: 0.15625 -> -0.828125.
TEST(DiLoCoTest, TheOuterUpdateMatchesAHandComputedReference) {
  runRanks(2, [](ProcessGroup& group) {
    std::vector<torch::Tensor> params = tensorsOf({4, 3}, 1.0f);
    DiLoCo diloco(params, dyadic(3));
    const float moves = group.rank() == 0 ? 0.25f : 0.5f;
    const std::vector<float> after = {1, 1, 1, 0.15625f, 0.15625f, 0.15625f, -0.828125f};
    for (int64_t step = 0; step < 7; ++step) {
      diloco.beginStep(step, &group);
      diloco.endStep();
      if (step % 3 == 0) {  // a round ended before this step: the replica is the global value
        for (const torch::Tensor& p : params) {
          EXPECT_TRUE(torch::equal(p, torch::full_like(p, after[step]))) << step << ": " << p;
        }
      }
      if (step < 6) moveBy(params, moves);
    }
    const DiLoCoState state = diloco.state();
    EXPECT_TRUE(torch::equal(state.global[0], torch::full({4}, -0.828125f)));
    EXPECT_TRUE(torch::equal(state.momentum[1], torch::full({3}, 1.6875f)));
    EXPECT_EQ(diloco.stats().rounds, 2);
  });
}

// setOuterLr: the syncs after it step with the new rate (alone, plain SGD: global -= lr x the
// outer gradient), and a rate that is not above 0 and finite is refused, changing nothing.
TEST(DiLoCoTest, TheOuterLearningRateCanBeSetBetweenRounds) {
  std::vector<torch::Tensor> params = tensorsOf({4}, 1.0f);
  DiLoCoOptions options;
  options.inner_steps = 1;
  options.outer_lr = 0.5;
  options.outer_momentum = 0;
  options.nesterov = false;
  DiLoCo diloco(params, options);
  moveBy(params, 0.5f);
  diloco.beginStep(1, nullptr);  // 1 - 0.5 x 0.5
  EXPECT_TRUE(torch::equal(params[0], torch::full({4}, 0.75f)));
  diloco.setOuterLr(0.25);
  EXPECT_EQ(diloco.outerLr(), 0.25);
  moveBy(params, 0.5f);
  diloco.beginStep(2, nullptr);  // 0.75 - 0.25 x 0.5
  EXPECT_TRUE(torch::equal(params[0], torch::full({4}, 0.625f)));
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    try {
      diloco.setOuterLr(bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("the outer learning rate must be above 0 and finite"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(diloco.outerLr(), 0.25);
}

// The papers' outer optimizer (lr 0.7, momentum 0.9) against the same formulas in double.
TEST(DiLoCoTest, ThePapersDefaultsFollowSgdWithNesterovMomentum) {
  runRanks(2, [](ProcessGroup& group) {
    std::vector<torch::Tensor> params = tensorsOf({5}, 2.0f);
    DiLoCoOptions options;
    options.inner_steps = 2;
    DiLoCo diloco(params, options);
    double global = 2, momentum = 0;
    for (int64_t round = 1; round <= 5; ++round) {
      const double move0 = 0.01 * static_cast<double>(round), move1 = 0.03;
      moveBy(params, static_cast<float>(group.rank() == 0 ? move0 : move1));
      moveBy(params, static_cast<float>(group.rank() == 0 ? move0 : move1));
      diloco.beginStep(2 * round, &group);
      const double g = (2 * move0 + 2 * move1) / 2;
      momentum = 0.9 * momentum + g;
      global -= 0.7 * (g + 0.9 * momentum);
      EXPECT_NEAR(params[0][0].item<double>(), global, 1e-5) << "round " << round;
    }
  });
}

// A worker that dies mid-round is not in the group that syncs: the survivors average over
// themselves. Rank 2 moved by 1.0 a step; the result is the two survivors' alone.
TEST(DiLoCoTest, ADeadWorkersInnerStepsAreDroppedFromTheRound) {
  std::vector<std::vector<torch::Tensor>> replicas;
  std::vector<std::unique_ptr<DiLoCo>> workers;
  const float moves[] = {0.25f, 0.5f, 1.0f};
  for (int r = 0; r < 3; ++r) {
    replicas.push_back(tensorsOf({6}, 1.0f));
    workers.push_back(std::make_unique<DiLoCo>(replicas.back(), dyadic(3)));
    for (int s = 0; s < 3; ++s) moveBy(replicas.back(), moves[r]);
  }
  runRanks(2, [&](ProcessGroup& group) {  // ranks 0 and 1 re-formed without rank 2
    workers[static_cast<size_t>(group.rank())]->beginStep(3, &group);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::equal(replicas[r][0], torch::full({6}, 0.15625f))) << replicas[r][0];
  }
}

// A collective that fails leaves the global parameters, the momentum, the residual and the
// replica as they were; the same step then syncs in the group that is left (here: alone).
TEST(DiLoCoTest, AFailedSyncChangesNothingAndTheStepIsRedone) {
  GroupOptions quick = testing::testGroupOptions();
  quick.timeout_seconds = 5;
  runRanks(
      2,
      [](ProcessGroup& group) {
        if (group.rank() == 1) return;  // dies: its group closes its connections
        std::vector<torch::Tensor> params = tensorsOf({300}, 1.0f);
        DiLoCoOptions options = dyadic(3);
        options.outer_compression = Compression::kInt8;
        DiLoCo diloco(params, options);
        for (int s = 0; s < 3; ++s) moveBy(params, 0.25f);
        EXPECT_THROW(diloco.beginStep(3, &group), CommError);
        EXPECT_TRUE(torch::equal(params[0], torch::full({300}, 0.25f)));
        EXPECT_TRUE(torch::equal(diloco.state().global[0], torch::full({300}, 1.0f)));
        EXPECT_TRUE(torch::equal(diloco.state().momentum[0], torch::zeros({300})));
        EXPECT_TRUE(torch::equal(diloco.residual(), torch::zeros({300})));
        EXPECT_EQ(diloco.stats().rounds, 0);
        diloco.beginStep(3, nullptr);  // 0.75 exactly in int8 (a scale of 0.75 / 127)
        EXPECT_NEAR(params[0][0].item<float>(), 1.0f - 0.5f * 1.5f * 0.75f, 1e-6);
        EXPECT_EQ(diloco.stats().rounds, 1);
      },
      quick);
}

// syncAll again after it was cut short: a member that already landed the last round (here rank 0,
// alone) sends its global parameters and momentum, the other takes them, and nobody moves twice;
// a second syncAll on members that all landed it changes nothing.
TEST(DiLoCoTest, SyncAllAgainAfterAFailureMovesNoFragmentTwice) {
  runRanks(2, [](ProcessGroup& group) {
    std::vector<torch::Tensor> params = tensorsOf({4, 3}, 1.0f);
    DiLoCoOptions options = dyadic(4);
    options.fragments = 2;
    DiLoCo diloco(params, options);
    moveBy(params, group.rank() == 0 ? 0.25f : 0.5f);
    if (group.rank() == 0) diloco.syncAll(nullptr);  // landed here, not on rank 1
    const DiLoCoState landed = diloco.state();
    diloco.syncAll(&group);
    const DiLoCoState after = diloco.state();
    // Rank 0's round alone: global 1 - 0.5 x (0.25 + 0.5 x 0.25) = 0.8125, momentum 0.25.
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(torch::equal(after.global[i], torch::full_like(after.global[i], 0.8125f)))
          << after.global[i];
      EXPECT_TRUE(torch::equal(after.momentum[i], torch::full_like(after.momentum[i], 0.25f)));
      EXPECT_TRUE(torch::equal(params[i], after.global[i]));
      if (group.rank() == 0) {
        EXPECT_TRUE(torch::equal(after.global[i], landed.global[i]));
      }
    }
    diloco.syncAll(&group);  // every member landed it: nothing moves
    EXPECT_TRUE(torch::equal(diloco.state().global[0], after.global[0]));
    EXPECT_TRUE(torch::equal(diloco.state().momentum[1], after.momentum[1]));
  });
}

// Buffers (attachBuffers) stay each replica's own between rounds, and become their average over
// the ranks before each round's first fragment syncs and in syncAll; bool buffers are left alone.
TEST(DiLoCoTest, BuffersAreAveragedOnceARoundAndInSyncAll) {
  runRanks(2, [](ProcessGroup& group) {
    std::vector<torch::Tensor> params = tensorsOf({4}, 1.0f);
    DiLoCo diloco(params, dyadic(3));
    torch::Tensor stats = torch::zeros({2});
    torch::Tensor count = torch::zeros({1}, torch::kInt64);
    torch::Tensor mask = torch::full({1}, group.rank() == 0, torch::kBool);
    diloco.attachBuffers({stats, count, mask});
    for (int64_t step = 0; step < 5; ++step) {
      diloco.beginStep(step, &group);
      if (step == 3) {  // the round's start: ((1 + 2 + 3) + 2 x (1 + 2 + 3)) / 2
        EXPECT_TRUE(torch::equal(stats, torch::full({2}, 9.0f))) << stats;
        EXPECT_TRUE(torch::equal(count, torch::full({1}, 3, torch::kInt64))) << count;
      }
      diloco.endStep();
      stats.add_(static_cast<float>((step + 1) * (group.rank() + 1)));  // each rank its own
      count.add_(1);
    }
    // 9 + 4 + 5 on rank 0, 9 + 8 + 10 on rank 1.
    EXPECT_TRUE(torch::equal(stats, torch::full({2}, group.rank() == 0 ? 18.0f : 27.0f))) << stats;
    diloco.syncAll(&group);
    EXPECT_TRUE(torch::equal(stats, torch::full({2}, 22.5f))) << stats;
    EXPECT_TRUE(torch::equal(count, torch::full({1}, 5, torch::kInt64))) << count;
    EXPECT_TRUE(torch::equal(mask, torch::full({1}, group.rank() == 0, torch::kBool)));
  });
}

// int8 with error feedback, one round a step for 200 steps: what rounding takes from a round comes
// back in the next, so the global parameters differ from the exact sum of the averaged outer
// gradients by exactly the mean of the ranks' last residuals (not by an error that grows with the
// rounds), each under half a quantization step; and every rank holds the same bits.
TEST(DiLoCoTest, Int8ErrorFeedbackLosesNothingOverManyRounds) {
  runRanks(2, [](ProcessGroup& group) {
    std::vector<torch::Tensor> params = {torch::zeros({300}), torch::zeros({5})};
    DiLoCoOptions options;
    options.inner_steps = 1;
    options.outer_lr = 1;
    options.outer_momentum = 0;
    options.nesterov = false;
    options.outer_compression = Compression::kInt8;
    DiLoCo diloco(params, options);
    torch::Tensor exact = torch::zeros({305}, torch::kFloat64);
    for (int64_t step = 1; step <= 200; ++step) {
      // Both ranks' moves, from seeds every rank knows; this rank applies its own. Each draw has a
      // generator of its own: the ranks are threads, and the global one is shared between them.
      torch::Tensor moves[2];
      for (int r = 0; r < 2; ++r) {
        const at::Generator seeded = at::detail::createCPUGenerator(step * 2 + r);
        moves[r] = torch::randn({305}, seeded) * (0.001 * static_cast<double>(1 + step % 7));
      }
      exact -= (moves[0].to(torch::kFloat64) + moves[1].to(torch::kFloat64)) / 2;
      {
        torch::NoGradGuard no_grad;
        params[0].sub_(moves[group.rank()].narrow(0, 0, 300));
        params[1].sub_(moves[group.rank()].narrow(0, 300, 5));
      }
      diloco.beginStep(step, &group);
    }
    const torch::Tensor global = torch::cat({params[0], params[1]}).to(torch::kFloat64);
    const torch::Tensor residuals = group.allgather(diloco.residual()).to(torch::kFloat64);
    const torch::Tensor drift = global - exact;
    EXPECT_LT((drift - residuals.mean(0)).abs().max().item<double>(), 1e-5);
    // Half a quantization step of the largest chunk: a move of 0.007 x 4.5 standard deviations.
    EXPECT_LT(residuals.abs().max().item<double>(), 0.007 * 4.5 / 254);
    const torch::Tensor all = group.allgather(global.to(torch::kFloat32));
    EXPECT_TRUE(torch::equal(all[0], all[1])) << "the replicas differ";
    EXPECT_EQ(diloco.stats().rounds, 200);
    // 305 values: two chunks of 256, each 256 bytes and a 4-byte scale, per round.
    EXPECT_EQ(diloco.stats().payload_bytes, 200u * (2 * 256 + 2 * 4));
  });
}

// With overlap the fragment's all-reduce is in flight between beginStep and endStep; it lands the
// same bits as a blocking sync.
TEST(DiLoCoTest, OverlapLandsTheSameUpdateAtEndStep) {
  for (Compression compression : {Compression::kNone, Compression::kBf16, Compression::kInt8}) {
    SCOPED_TRACE(compressionName(compression));
    std::vector<torch::Tensor> results[2];
    for (bool overlap : {false, true}) {
      runRanks(2, [&](ProcessGroup& group) {
        std::vector<torch::Tensor> params = tensorsOf({40, 9, 3}, 1.0f);
        DiLoCoOptions options = dyadic(4);
        options.fragments = 2;
        options.overlap = overlap;
        options.outer_compression = compression;
        DiLoCo diloco(params, options);
        for (int64_t step = 0; step < 12; ++step) {
          diloco.beginStep(step, &group);
          diloco.endStep();
          moveBy(params, group.rank() == 0 ? 0.1f : 0.3f);
        }
        if (group.rank() == 0) results[overlap ? 1 : 0] = diloco.state().global;
      });
    }
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(results[0][i], results[1][i])) << i;
  }
}

TEST(DiLoCoTest, BadOptionsSayWhatIsAllowed) {
  const auto message = [](DiLoCoOptions options, size_t tensors) {
    try {
      DiLoCo diloco(tensorsOf(std::vector<int64_t>(tensors, 2), 0), options);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  DiLoCoOptions o;
  o.inner_steps = 0;
  EXPECT_EQ(message(o, 2), "DiLoCo: inner_steps is 0; it must be at least 1");
  o = DiLoCoOptions();
  o.fragments = 3;
  EXPECT_EQ(message(o, 2),
            "DiLoCo: fragments is 3 but the model has 2 parameter tensor(s); a fragment holds "
            "whole tensors, so use at most 2");
  o.inner_steps = 2;
  EXPECT_EQ(message(o, 4),
            "DiLoCo: fragments is 3; it must be in [1, inner_steps = 2], so that each fragment "
            "has a step of its own");
  o = DiLoCoOptions();
  o.outer_momentum = 0;
  EXPECT_EQ(message(o, 2), "DiLoCo: nesterov needs outer_momentum above 0");
}

TEST(DiLoCoTest, StateAndResidualRefuseWhatDoesNotFitAndChangeNothing) {
  std::vector<torch::Tensor> params = tensorsOf({3, 2}, 1.0f);
  DiLoCoOptions options;
  options.outer_compression = Compression::kBf16;
  DiLoCo diloco(params, options);
  DiLoCoState state = diloco.state();
  state.global[0] = torch::zeros({3});
  state.momentum[1] = torch::zeros({5});
  EXPECT_THROW(diloco.loadState(state), std::invalid_argument);
  EXPECT_TRUE(torch::equal(diloco.state().global[0], torch::ones({3})));
  EXPECT_THROW(diloco.setResidual(torch::zeros({4})), std::invalid_argument);
  diloco.setResidual(torch::full({5}, 0.5f));
  EXPECT_TRUE(torch::equal(diloco.residual(), torch::full({5}, 0.5f)));
}

TEST(DiLoCoTest, DataParallelRefusesInt8) {
  runRanks(1, [](ProcessGroup& group) {
    DataParallelOptions options;
    options.compression = Compression::kInt8;
    try {
      DataParallel sync(group, options);
      ADD_FAILURE() << "int8 accepted";
    } catch (const GroupError& e) {
      EXPECT_STREQ(e.what(),
                   "compression int8 is for DiLoCo's outer gradients (<cumulus/diloco.h>); a "
                   "gradient all-reduce takes none or bf16");
    }
  });
}

}  // namespace
}  // namespace cumulus
