// cumulus::Elastic over a group of the program's own (ranks as threads) and in a world of one: no
// recovery in place, the same loop. The stop agreement of ElasticOptions::stop is the one
// boundary() asks, atBoundary runs the program's own collectives, and what is missing or out of
// order is a clear error.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "cumulus/elastic.h"
#include "tests/api/elastic_parts.h"
#include "tests/api/ranks.h"

namespace cumulus {
namespace {

using testing::CheckpointAt;
using testing::quietOptions;

ElasticState trivialState() {
  return {[] { return Checkpoint{}; }, [](const Checkpoint&) {}, "plain"};
}

TEST(ElasticPlainTest, OverAProgramsGroupTheLoopSyncsAgreesAndRunsItsOwnCollectives) {
  testing::runRanks(2, [](ProcessGroup& group) {
    ElasticOptions options = quietOptions();
    std::shared_ptr<CheckpointAt> agreement;
    options.stop = [&agreement](std::shared_ptr<StopAgreement> standard) {
      EXPECT_NE(dynamic_cast<PreemptionWatcher*>(standard.get()), nullptr);
      agreement = std::make_shared<CheckpointAt>(std::move(standard), 2);
      return agreement;
    };
    Elastic elastic(&group, options);
    elastic.setState(trivialState());
    torch::Tensor w = torch::zeros({3}, torch::requires_grad());
    elastic.attach({w});
    ASSERT_TRUE(elastic.start(0));
    EXPECT_FALSE(elastic.inPlace());
    EXPECT_FALSE(elastic.joining());
    EXPECT_EQ(elastic.size(), 2);
    EXPECT_EQ(&elastic.group(), &group);
    std::vector<ElasticAction> actions;
    double summed = 0;
    while (elastic.step() < 3) {
      elastic.train([&] {
        // Rank r's gradient is r + 1 everywhere: their sum is 3 on every rank.
        elastic.sync().backward((w * static_cast<double>(elastic.rank() + 1)).sum());
        EXPECT_EQ(w.grad()[0].item<float>(), 3.0f);
        w.mutable_grad().zero_();
      });
      ASSERT_TRUE(elastic.atBoundary([&] {
        torch::Tensor one = torch::ones({1});
        elastic.group().allreduce(one);
        summed += one.item<double>();
      }));
      if (elastic.step() == 3) break;
      actions.push_back(elastic.boundary());
      EXPECT_TRUE(elastic.leaving().empty());
    }
    EXPECT_EQ(elastic.step(), 3);
    EXPECT_EQ(summed, 6.0);  // 2 per boundary, 3 boundaries
    EXPECT_EQ(actions,
              (std::vector<ElasticAction>{ElasticAction::kContinue, ElasticAction::kCheckpoint}));
    ASSERT_NE(agreement, nullptr);
    EXPECT_EQ(agreement->calls, 2);
    elastic.finish();
  });
}

TEST(ElasticPlainTest, AWorldOfOneNeedsNoGroupAndSaysWhatIsMissing) {
  EXPECT_FALSE(Elastic::inPlaceRequested());  // no launcher's variables in this process
  Elastic elastic(nullptr, quietOptions());
  EXPECT_EQ(elastic.rank(), 0);
  EXPECT_EQ(elastic.size(), 1);
  EXPECT_EQ(elastic.memberId(), "");
  try {
    elastic.start(0);
    FAIL() << "started without a state";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), "Elastic::start: call setState() first");
  }
  elastic.setState(trivialState());
  ASSERT_TRUE(elastic.start(0));
  try {
    elastic.group();
    FAIL() << "a world of one has a group";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), "Elastic::group: a world of one has no group");
  }
  try {
    elastic.sync();
    FAIL() << "a sync without parameters";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "Elastic::sync: call attach() with the parameters (over a group) and start() first");
  }
  int ran = 0;
  elastic.train([&] { ++ran; });
  EXPECT_EQ(elastic.step(), 1);
  EXPECT_EQ(elastic.boundary(), ElasticAction::kContinue);
  // Without recovery in place a communication failure is the program's (and its launcher's).
  EXPECT_THROW(elastic.atBoundary([] {
    throw CommError(CommErrorKind::kPeerClosed, "allreduce", 4, 1, "peer closed");
  }),
               CommError);
  EXPECT_THROW(elastic.train([] {
    throw CommError(CommErrorKind::kPeerClosed, "allreduce", 5, 1, "peer closed");
  }),
               CommError);
  EXPECT_EQ(elastic.step(), 1) << "a failed step is not committed";
  EXPECT_EQ(ran, 1);
  // Nested in another's fn (a recorder's sum inside the program's boundary work), atBoundary and
  // atEnd just run theirs: the time is the outer call's, counted once, and a failure is the
  // outer call's to handle.
  const double before = elastic.times().at_boundary;
  const auto began = std::chrono::steady_clock::now();
  bool inner = false;
  EXPECT_TRUE(elastic.atBoundary([&] {
    EXPECT_TRUE(elastic.atBoundary([&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
      elastic.atEnd([&] { inner = true; });
    }));
  }));
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_TRUE(inner);
  EXPECT_GE(elastic.times().at_boundary - before, 0.02);
  EXPECT_LE(elastic.times().at_boundary - before, wall);
  EXPECT_THROW(elastic.atBoundary([&] {
    elastic.atBoundary(
        [] { throw CommError(CommErrorKind::kPeerClosed, "allreduce", 6, 1, "peer closed"); });
    ADD_FAILURE() << "the outer work went on after a failure";
  }),
               CommError);
}

TEST(ElasticPlainTest, AStopChoiceThatReturnsNothingIsRefused) {
  ElasticOptions options = quietOptions();
  options.stop = [](std::shared_ptr<StopAgreement>) { return std::shared_ptr<StopAgreement>(); };
  try {
    Elastic elastic(nullptr, options);
    FAIL() << "an Elastic without a stop agreement";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "ElasticOptions::stop returned no agreement");
  }
}

TEST(ElasticPlainTest, TheStateAndTheParametersAreRegisteredBeforeStart) {
  Elastic elastic(nullptr, quietOptions());
  EXPECT_THROW(elastic.setState(ElasticState{}), std::invalid_argument);
  elastic.setState(trivialState());
  ASSERT_TRUE(elastic.start(0));
  try {
    elastic.setState(trivialState());
    FAIL() << "a state registered after start";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), "Elastic::setState: call it before start()");
  }
  EXPECT_THROW(elastic.attach({torch::zeros({1})}), std::logic_error);
}

}  // namespace
}  // namespace cumulus
