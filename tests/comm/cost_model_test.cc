#include "comm/cost_model.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace cumulus::comm {
namespace {

// Writes `text` to `path` and expects load() to refuse it with `fragment` and the path.
void expectLoadErrorFor(const std::string& path, const std::string& text,
                        const std::string& fragment) {
  std::ofstream(path) << text;
  try {
    CostModel::load(path);
    FAIL() << "expected an error for: " << text;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Expects load() to refuse `text` with exactly `message`.
void expectLoadErrorExactly(const std::string& path, const std::string& text,
                            const std::string& message) {
  std::ofstream(path) << text;
  try {
    CostModel::load(path);
    FAIL() << "expected an error for: " << text;
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(CostModel, UsableCoresCountsTheAffinityMask) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(usableCores(), CPU_COUNT(&set));
  EXPECT_GE(usableCores(), 1);
}

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

TEST(CostModel, HierarchicalFormulaMatchesHandComputedValues) {
  // α = 1, β = 0.01, γ = 0.001 across hosts; α_l = 0.1, β_l = 0.001 inside; n = 120, H = 4, L = 2:
  //   in host      = 2·1·0.1 + 2·(1/2)·120·0.001 + (1/2)·120·0.001    = 0.2 + 0.12 + 0.06 = 0.38
  //   across hosts = 2·3·1 + 2·(3/4)·120·0.01 + 3/(4·2)·120·0.001    = 6 + 1.8 + 0.045  = 7.845
  //   flat ring (p = 8) = 2·7·1 + 2·(7/8)·120·0.01 + (7/8)·120·0.001 = 14 + 2.1 + 0.105 = 16.205
  //   tree (p = 8)      = 2·3·(1 + 1.2) + 3·120·0.001                = 13.2 + 0.36      = 13.56
  const CostModel m = CostModel(1.0, 0.01, 0.001).withLocalLink(0.1, 0.001);
  EXPECT_EQ(m.alphaLocal(), 0.1);
  EXPECT_EQ(m.betaLocal(), 0.001);
  EXPECT_NEAR(m.predictHierarchical(120, 4, 2), 8.225, 1e-12);
  const Topology fourByTwo({"a", "a", "b", "b", "c", "c", "d", "d"});
  EXPECT_NEAR(m.predict(Algorithm::kHierarchical, 120, fourByTwo), 8.225, 1e-12);
  EXPECT_NEAR(m.predict(Algorithm::kRing, 120, fourByTwo), 16.205, 1e-12);
  EXPECT_NEAR(m.predict(Algorithm::kTree, 120, fourByTwo), 13.56, 1e-12);
  EXPECT_EQ(m.pick(120, fourByTwo), Algorithm::kHierarchical);
  EXPECT_NEAR(m.predict(Algorithm::kAuto, 120, fourByTwo), 8.225, 1e-12);
  // One host: the local ring (H = 1), which is the ring formula with α_l, β_l:
  //   2·3·0.1 + 2·(3/4)·100·0.001 + (3/4)·100·0.001 = 0.6 + 0.15 + 0.075 = 0.825.
  EXPECT_NEAR(m.predict(Algorithm::kHierarchical, 100, 4), 0.825, 1e-12);
  EXPECT_NEAR(m.predictHierarchical(100, 1, 4), 0.825, 1e-12);
  // One rank per host: the ring across hosts (L = 1) is the flat ring.
  EXPECT_NEAR(m.predictHierarchical(100, 5, 1), m.predict(Algorithm::kRing, 100, 5), 1e-12);
  // Uneven hosts run (and are priced as) the flat ring; auto does not consider hierarchical.
  const Topology uneven({"a", "a", "b"});
  EXPECT_NEAR(m.predict(Algorithm::kHierarchical, 120, uneven), m.predict(Algorithm::kRing, 120, 3),
              1e-12);
  EXPECT_NE(m.pick(120, uneven), Algorithm::kHierarchical);
  // Without local costs given, α_l and β_l are the built-in α and β.
  EXPECT_EQ(CostModel(1.0, 0.01, 0.001).alphaLocal(), CostModel().alpha());
  EXPECT_EQ(CostModel(1.0, 0.01, 0.001).betaLocal(), CostModel().beta());
  EXPECT_THROW(m.withLocalLink(-1, 0), std::invalid_argument);
}

// auto considers hierarchical only with H ≥ 2 hosts of L ≥ 2 ranks, all alike; on one host, or
// with one rank per host, pick() is what it always was.
TEST(CostModel, AutoConsidersHierarchicalOnlyOnSeveralHostsOfSeveralRanks) {
  const CostModel m = CostModel(50e-6, 8e-9, 0.1e-9);  // a slow link; fast local defaults
  const Topology oneHost({"a", "a", "a", "a"});
  const Topology onePerHost({"a", "b", "c", "d"});
  const Topology twoByTwo({"a", "a", "b", "b"});
  for (double n : {4096.0, 1048576.0, 67108864.0}) {
    EXPECT_EQ(m.pick(n, oneHost), m.pick(n, 4)) << n;
    EXPECT_EQ(m.pick(n, onePerHost), m.pick(n, 4)) << n;
  }
  EXPECT_EQ(m.pick(64 << 20, twoByTwo), Algorithm::kHierarchical);
  EXPECT_EQ(m.pick(4096, twoByTwo), Algorithm::kHierarchical);  // 2 slow messages, not 6 or 4
}

TEST(CostModel, DefaultsPreferTreeForSmallAndRingForLarge) {
  CostModel m;
  EXPECT_EQ(m.pick(4096, 4), Algorithm::kTree);
  EXPECT_EQ(m.pick(64 << 20, 4), Algorithm::kRing);
}

TEST(CostModel, SaveLoadRoundTripAndErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "cost_model_test.json";
  CostModel(1.25e-5, 3.5e-10, 7.25e-11).save(path);
  CostModel loaded = CostModel::load(path);
  EXPECT_EQ(loaded.alpha(), 1.25e-5);
  EXPECT_EQ(loaded.beta(), 3.5e-10);
  EXPECT_EQ(loaded.gamma(), 7.25e-11);

  auto expectLoadError = [&](const std::string& text, const std::string& fragment) {
    expectLoadErrorFor(path, text, fragment);
  };
  expectLoadError(R"({"alpha_s": 1, "beta_s_per_byte": 2})", "lacks \"gamma_s_per_byte\"");
  expectLoadError(R"({"alpha_s": 1, "beta_s_per_byte": "x", "gamma_s_per_byte": 1})",
                  "\"beta_s_per_byte\": expected a finite number >= 0, got \"x\"");
  expectLoadError(R"({"alpha_s": 1, "delta": 2})",
                  "\"delta\": unknown key (expected alpha_s, beta_s_per_byte, gamma_s_per_byte, "
                  "alpha_local_s, beta_local_s_per_byte, cores, busy_ranks, alpha_busy_s, "
                  "beta_at, busy_at)");
  expectLoadError(R"({"alpha_s": -1})", "\"alpha_s\": expected a finite number >= 0, got -1");
  expectLoadError("{\"alpha_s\": 1,\n", "is not valid JSON: parse error at line 2, column 1");
  expectLoadError("[1, 2]", "expected a JSON object {\"alpha_s\": ..., ...}");
  // The text format of earlier versions: refused, with the command that rewrites it.
  expectLoadErrorExactly(path, "# cumulus cost model\nalpha_s 1\nbeta_s_per_byte 2\n",
                         "cost model file '" + path +
                             "' is in the text format of earlier versions; re-run `cumulus-bench "
                             "calibrate --out " +
                             path + "` to measure it again as JSON");
  expectLoadError(R"({"alpha_s": 1, "beta_s_per_byte": 2, "gamma_s_per_byte": 3,
                      "alpha_local_s": "x"})",
                  "\"alpha_local_s\": expected a finite number >= 0, got \"x\"");
  std::remove(path.c_str());
  try {
    CostModel::load(path);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cost model file '" + path + "': not found");
  }
}

// comm.cost_model naming a FIFO: every worker would wait in open(2) for a writer that never comes.
// It is refused at once, naming the path.
TEST(CostModel, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = ::testing::TempDir() + "cost_model_fifo_" + std::to_string(::getpid());
  std::remove(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    CostModel::load(path);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cost model file '" + path + "': is a FIFO, not a regular file");
  }
  std::remove(path.c_str());
}

// The local link's costs are written only when given, and read back exactly; one alone keeps the
// other's default.
TEST(CostModel, LocalLinkCostsRoundTripThroughTheFile) {
  const std::string path = ::testing::TempDir() + "cost_model_local_test.json";
  CostModel(1e-4, 8e-9, 1e-10).withLocalLink(2.5e-6, 1.25e-10).save(path);
  CostModel loaded = CostModel::load(path);
  EXPECT_EQ(loaded.alphaLocal(), 2.5e-6);
  EXPECT_EQ(loaded.betaLocal(), 1.25e-10);
  EXPECT_EQ(loaded.alpha(), 1e-4);
  CostModel(1e-4, 8e-9, 1e-10).save(path);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("local"), std::string::npos) << text;
  std::ofstream(path) << R"({"alpha_s": 1, "beta_s_per_byte": 2, "gamma_s_per_byte": 3,
                             "beta_local_s_per_byte": 4e-10})";
  loaded = CostModel::load(path);
  EXPECT_EQ(loaded.betaLocal(), 4e-10);
  EXPECT_EQ(loaded.alphaLocal(), CostModel().alpha());
  std::remove(path.c_str());
}

TEST(CostModel, RefinedModelInterpolatesBetaAndModelsOversubscription) {
  // α = 1, γ = 0.001, cores = 2; β rows at n = 100 (oneway 0.01, duplex 0.02, funnel 0.1) and
  // n = 10000 (0.03, 0.04, 0.2). At n = 1000 (halfway in log n) β = 0.02 / 0.03 / 0.15.
  CostModel m(1.0, 0.001, {{10000, 0.03, 0.04, 0.2}, {100, 0.01, 0.02, 0.1}}, 2);
  EXPECT_EQ(m.cores(), 2);
  EXPECT_DOUBLE_EQ(m.beta(), 0.03);  // the largest row's one-way β
  EXPECT_NEAR(m.betaOneway(1000), 0.02, 1e-12);
  EXPECT_NEAR(m.betaDuplex(1000), 0.03, 1e-12);
  EXPECT_NEAR(m.betaFunnel(1000), 0.15, 1e-12);
  EXPECT_DOUBLE_EQ(m.betaOneway(10), 0.01);   // clamped below
  EXPECT_DOUBLE_EQ(m.betaDuplex(1e6), 0.04);  // clamped above
  // The ranks share one host: at p ranks, β is looked up where two ranks had the same p·n bytes
  // in all, n·p/2. At 200 (p = 4): log(2)/log(100) of the way from 100 to 10000.
  const double duplex200 = 0.02 + 0.02 * std::log(2.0) / std::log(100.0);
  EXPECT_NEAR(m.betaDuplex(200), duplex200, 1e-15);
  // ring, p = 4, n = 100: two waves of one rank's work, (3/4)·(2·4·1 + 100·(2β + 0.001)).
  EXPECT_NEAR(m.predict(Algorithm::kRing, 100, 4), 2 * 0.75 * (8 + 100 * (2 * duplex200 + 0.001)),
              1e-12);
  // ring, p = 2: no oversubscription, β at n: 2·1·1 + 100·0.02 + (1/2)·100·0.001.
  EXPECT_NEAR(m.predict(Algorithm::kRing, 100, 2), 2 + 2 + 0.05, 1e-12);
  // tree, p = 8, n = 100: β_oneway at 400 = 0.01 + 0.02·log(4)/log(100); path 2·3·(1 + 100β) +
  // 3·0.1; work 7·(2 + 100·(4β + 0.001))/2, the larger.
  const double oneway400 = 0.01 + 0.02 * std::log(4.0) / std::log(100.0);
  EXPECT_NEAR(m.predict(Algorithm::kTree, 100, 8), 7 * (2 + 100 * (4 * oneway400 + 0.001)) / 2,
              1e-12);
  // tree, p = 2: path 2·(1 + 1) + 0.1 = 4.1 beats work 1·(2 + 4 + 0.1)/2 = 3.05.
  EXPECT_NEAR(m.predict(Algorithm::kTree, 100, 2), 4.1, 1e-12);
  // funnel, p = 4, n = 100: serial 2·3·(1 + 10) + 3·0.1 = 66.3, over c·q/(q+1) = 1.5 cores.
  EXPECT_NEAR(m.predict(Algorithm::kFunnel, 100, 4, true), 66.3 / 1.5, 1e-12);
  // ... and at p = 2 over max(1, 2·1/2) = 1 core: 2·(1 + 10) + 0.1.
  EXPECT_NEAR(m.predict(Algorithm::kFunnel, 100, 2, true), 22.1, 1e-12);
}

TEST(CostModel, MeasuredBusyCostsPriceRanksBeyondTheCores) {
  // α = 1, γ = 0.001, one β row (oneway 0.01, duplex 0.02, funnel 0.1), 2 cores; beyond them a
  // message costs α_busy = 0.25 and a byte w_tree = 0.5, w_ring = 0.3 (one row: every n).
  CostModel m(1.0, 0.001, {{100, 0.01, 0.02, 0.1}}, 2, {4, 0.25, {{100, 0.5, 0.3}}});
  EXPECT_EQ(m.alphaBusy(), 0.25);
  EXPECT_DOUBLE_EQ(m.workTree(1e6), 0.5);
  EXPECT_DOUBLE_EQ(m.workRing(1), 0.3);
  // tree, p = 8, n = 100: path 2·3·(1 + 1) + 3·0.1 = 12.3; busy 7·(2·0.25 + 100·0.5)/2 = 176.75.
  EXPECT_NEAR(m.predict(Algorithm::kTree, 100, 8), 176.75, 1e-9);
  // tree, p = 2 = cores: the table does not apply; path 4.1 beats 1·(2 + 4 + 0.1)/2.
  EXPECT_NEAR(m.predict(Algorithm::kTree, 100, 2), 4.1, 1e-12);
  // ring, p = 3: ⌈3/2⌉ = 2 waves of one rank's work (2/3)·(2·3·0.25 + 100·0.3) = 21: 42.
  EXPECT_NEAR(m.predict(Algorithm::kRing, 100, 3), 42.0, 1e-9);
  // ring, p = 2: the path, 2·1·1 + 2·(1/2)·100·0.02 + (1/2)·100·0.001 = 4.05.
  EXPECT_NEAR(m.predict(Algorithm::kRing, 100, 2), 4.05, 1e-12);
  // Without the measurements the same p = 3 ring is the path stretched by the waves:
  // 2 · (2/3) · (2·3·1 + 100·(2·0.02 + 0.001)) = 2 · (2/3) · 10.1.
  CostModel derived(1.0, 0.001, {{100, 0.01, 0.02, 0.1}}, 2);
  EXPECT_EQ(derived.alphaBusy(), 1.0);
  EXPECT_NEAR(derived.predict(Algorithm::kRing, 100, 3), 2.0 * 2 / 3 * 10.1, 1e-9);
  EXPECT_NEAR(derived.workTree(100), 4 * 0.01 + 0.001, 1e-15);
  // Two busy rows, measured with P = 4 ranks: p = 8 ranks of 100 bytes stream what 4 ranks of 200
  // did, so the tree's work is the 200 row's: 7·(2·0.25 + 100·1.0)/2.
  CostModel twoRows(1.0, 0.001, {{100, 0.01, 0.02, 0.1}}, 2,
                    {4, 0.25, {{100, 0.5, 0.3}, {200, 1.0, 0.6}}});
  EXPECT_NEAR(twoRows.predict(Algorithm::kTree, 100, 8), 7 * (0.5 + 100 * 1.0) / 2, 1e-9);
  // ... and p = 4 ranks of 100 bytes are the 100 row: 3·(0.5 + 100·0.5)/2.
  EXPECT_NEAR(twoRows.predict(Algorithm::kTree, 100, 4), 3 * (0.5 + 100 * 0.5) / 2, 1e-9);
  EXPECT_THROW(CostModel(1.0, 0.001, {{100, 0.01, 0.02, 0.1}}, 2, {2, 0.25, {{100, 0.5, 0.3}}}),
               std::invalid_argument);  // measured with no more ranks than cores

  const std::string path = ::testing::TempDir() + "/cost_model_busy.json";
  std::ofstream(path) << "a longer file than the model writes, which save() must replace whole\n"
                      << std::string(4096, '#') << "\n";
  m.save(path);
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());  // renamed into place
  const CostModel loaded = CostModel::load(path);
  EXPECT_EQ(loaded.alphaBusy(), 0.25);
  EXPECT_EQ(loaded.busyRanks(), 4);
  ASSERT_EQ(loaded.busy().size(), 1u);
  EXPECT_EQ(loaded.busy()[0].tree, 0.5);
  EXPECT_EQ(loaded.predict(Algorithm::kTree, 100, 8), m.predict(Algorithm::kTree, 100, 8));
  auto expectLoadError = [&](const std::string& text, const std::string& fragment) {
    expectLoadErrorFor(path, text, fragment);
  };
  const std::string head = R"({"alpha_s": 1, "beta_s_per_byte": 1, "gamma_s_per_byte": 1, )";
  expectLoadError(head + R"("busy_at": [{"bytes": 100, "tree": 0.5}]})",
                  "\"busy_at[0]\": expected an object with exactly bytes, tree, ring, got "
                  "{\"bytes\":100,\"tree\":0.5}");
  expectLoadError(head + R"("busy_at": [{"bytes": 100, "tree": 0.5, "ring": -3}]})",
                  "\"busy_at[0].ring\": expected a finite number >= 0, got -3");
  expectLoadError(head + R"("busy_at": [{"bytes": 0, "tree": 0.5, "ring": 0.3}]})",
                  "\"busy_at[0].bytes\": expected a size in bytes > 0, got 0");
  expectLoadError(head + R"("busy_at": [{"bytes": 100, "tree": 0.5, "ring": 0.3}]})",
                  "\"busy_at\": needs \"cores\": it prices ranks that outnumber the cores");
  expectLoadError(head + R"("alpha_busy_s": 2})", "\"alpha_busy_s\": needs \"cores\"");
  expectLoadError(head + R"("cores": 2, "busy_at": [{"bytes": 100, "tree": 0.5, "ring": 0.3}]})",
                  "\"busy_at\": needs \"busy_ranks\" above the 2 cores");
  expectLoadError(head + R"("cores": 2, "busy_ranks": 2, "alpha_busy_s": 1})",
                  "\"alpha_busy_s\": needs \"busy_ranks\" above the 2 cores");
  expectLoadError(head + R"("busy_ranks": "x"})",
                  "\"busy_ranks\": expected an integer >= 0, got \"x\"");
  expectLoadError(head + R"("cores": 2, "alpha_busy_s": -2})",
                  "\"alpha_busy_s\": expected a finite number >= 0, got -2");
  std::remove(path.c_str());
  try {
    m.save(::testing::TempDir() + "/no-such-dir/cost_model.json");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write cost model file '"), std::string::npos)
        << e.what();
  }
}

TEST(CostModel, RefinedModelRoundTripsThroughItsFile) {
  const std::string path = ::testing::TempDir() + "/cost_model_refined.json";
  CostModel(2e-6, 1.5e-10, {{1048576, 1e-10, 3e-10, 2e-9}, {67108864, 3e-10, 7e-10, 1.5e-9}}, 2)
      .save(path);
  CostModel loaded = CostModel::load(path);
  EXPECT_EQ(loaded.cores(), 2);
  ASSERT_EQ(loaded.betas().size(), 2u);
  EXPECT_EQ(loaded.betas()[1].bytes, 67108864.0);
  EXPECT_EQ(loaded.betas()[1].duplex, 7e-10);
  EXPECT_EQ(loaded.betas()[0].funnel, 2e-9);
  EXPECT_EQ(loaded.gamma(), 1.5e-10);
  EXPECT_EQ(
      loaded.predict(Algorithm::kRing, 4e6, 4),
      CostModel(2e-6, 1.5e-10, {{1048576, 1e-10, 3e-10, 2e-9}, {67108864, 3e-10, 7e-10, 1.5e-9}}, 2)
          .predict(Algorithm::kRing, 4e6, 4));
  expectLoadErrorFor(path,
                     R"({"alpha_s": 1, "beta_s_per_byte": 1, "gamma_s_per_byte": 1, "beta_at": [)"
                     R"({"bytes": 1, "oneway": 1, "duplex": 1, "funnel": 1}, {"bytes": 1}]})",
                     "\"beta_at[1]\": expected an object with exactly bytes, oneway, duplex, "
                     "funnel, got {\"bytes\":1}");
  expectLoadErrorFor(path,
                     R"({"alpha_s": 1, "beta_s_per_byte": 1, "gamma_s_per_byte": 1, "beta_at": 3})",
                     "\"beta_at\": expected a list of rows, got 3");
  std::remove(path.c_str());
}

// The calibrations committed under bench/results/ are usable as `comm.cost_model` as they are.
TEST(CostModel, CommittedCalibrationsLoad) {
  const std::string dir = std::string(CUMULUS_SOURCE_DIR) + "/bench/results/";
  const CostModel loopback = CostModel::load(dir + "cost_model.json");
  EXPECT_EQ(loopback.alpha(), 2.332009e-06);
  EXPECT_EQ(loopback.cores(), 2);
  EXPECT_EQ(loopback.busyRanks(), 4);
  EXPECT_EQ(loopback.betas().size(), 4u);
  EXPECT_EQ(loopback.busy().size(), 4u);
  EXPECT_EQ(CostModel::load(dir + "cost_model_tcp.json").betas().size(), 4u);
  for (int hosts : {2, 4, 8}) {
    const std::string name = "multihost-cost-p" + std::to_string(hosts) + ".json";
    EXPECT_EQ(CostModel::load(dir + name).gamma(), 1e-10) << name;
  }
}

}  // namespace
}  // namespace cumulus::comm
