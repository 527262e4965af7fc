#include "comm/cost_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace cumulus::comm {
namespace {

TEST(CostModel, FormulasMatchHandComputedValues) {
  // α = 1, β = 0.01, γ = 0.001, n = 100, p = 5 (⌈log₂5⌉ = 3):
  //   funnel = 2·4·(1 + 1) + 4·100·0.001        = 16.4
  //   tree   = 2·3·(1 + 1) + 3·100·0.001        = 12.3
  //   ring   = 2·4·1 + 2·(4/5)·1 + (4/5)·0.1    = 8 + 1.6 + 0.08 = 9.68
  CostModel m(1.0, 0.01, 0.001);
  EXPECT_NEAR(m.predict(Algorithm::kFunnel, 100, 5), 16.4, 1e-12);
  EXPECT_NEAR(m.predict(Algorithm::kTree, 100, 5), 12.3, 1e-12);
  EXPECT_NEAR(m.predict(Algorithm::kRing, 100, 5), 9.68, 1e-12);
  // p = 8: ⌈log₂8⌉ = 3 exactly; p = 1: nothing to do.
  EXPECT_NEAR(m.predict(Algorithm::kTree, 0, 8), 6.0, 1e-12);
  EXPECT_NEAR(m.predict(Algorithm::kRing, 0, 8), 14.0, 1e-12);
  EXPECT_EQ(m.predict(Algorithm::kRing, 1000, 1), 0.0);
  EXPECT_EQ(m.predict(Algorithm::kTree, 1000, 1), 0.0);
}

TEST(CostModel, PickSwitchesFromTreeToRingAsSizeGrows) {
  CostModel m(10e-6, 0.25e-9, 0.1e-9);
  // p = 8: tree 6α vs ring 14α at n = 0; ring wins once 6nβ+3nγ − 1.75nβ−0.875nγ > 8α,
  // i.e. n > 80e-6 / (4.25·0.25e-9 + 2.125·0.1e-9) ≈ 62.7 kB.
  EXPECT_EQ(m.pick(4096, 8), Algorithm::kTree);
  EXPECT_EQ(m.pick(50e3, 8), Algorithm::kTree);
  EXPECT_EQ(m.pick(80e3, 8), Algorithm::kRing);
  EXPECT_EQ(m.pick(64 << 20, 8), Algorithm::kRing);
  // p = 2: ring ≤ tree for every n (the same two messages, half the bytes).
  EXPECT_EQ(m.pick(1 << 20, 2), Algorithm::kRing);
  // Funnel only when offered, and then only when it is the cheapest.
  CostModel cheapFunnelLatency(0, 1e-9, 0);
  EXPECT_NE(cheapFunnelLatency.pick(1e6, 4, true), Algorithm::kFunnel);
  EXPECT_EQ(m.predict(Algorithm::kAuto, 4096, 8), m.predict(Algorithm::kTree, 4096, 8));
}

TEST(CostModel, DefaultsPreferTreeForSmallAndRingForLarge) {
  CostModel m;
  EXPECT_EQ(m.pick(4096, 4), Algorithm::kTree);
  EXPECT_EQ(m.pick(64 << 20, 4), Algorithm::kRing);
}

TEST(CostModel, SaveLoadRoundTripAndErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "cost_model_test.txt";
  CostModel(1.25e-5, 3.5e-10, 7.25e-11).save(path);
  CostModel loaded = CostModel::load(path);
  EXPECT_EQ(loaded.alpha(), 1.25e-5);
  EXPECT_EQ(loaded.beta(), 3.5e-10);
  EXPECT_EQ(loaded.gamma(), 7.25e-11);

  auto expectLoadError = [&](const std::string& text, const std::string& fragment) {
    std::ofstream(path) << text;
    try {
      CostModel::load(path);
      FAIL() << "expected an error for: " << text;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expectLoadError("alpha_s 1\nbeta_s_per_byte 2\n", "lacks 'gamma_s_per_byte'");
  expectLoadError("alpha_s 1\nbeta_s_per_byte x\ngamma_s_per_byte 1\n",
                  "line 2: 'x' is not a finite number");
  expectLoadError("# c\nalpha_s 1\ndelta 2\n", "line 3: unknown key 'delta'");
  expectLoadError("alpha_s -1\n", "line 1: '-1' is not a finite number >= 0");
  std::remove(path.c_str());
  EXPECT_THROW(CostModel::load(path), std::runtime_error);
}

}  // namespace
}  // namespace cumulus::comm
