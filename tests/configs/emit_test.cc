// toYaml round trips and the reference table in docs/configuration.md.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "configs/parse.h"
#include "configs/reference.h"
#include "configs/schema.h"
#include "tests/test_support.h"

namespace cumulus::configs {
namespace {

TEST(EmitTest, DefaultsRoundTrip) {
  Experiment defaults;
  std::string yaml = toYaml(defaults);
  EXPECT_EQ(parseExperiment(yaml, "toYaml"), defaults);
  EXPECT_EQ(yaml.rfind("name: experiment\nmodel:\n  name: mlp\n  hidden: [256, 128, 100]\n", 0),
            0u);
  // One line per key, in table order, with a header line before each section.
  std::vector<std::string> expected;
  std::string_view section;
  for (const KeySpec& key : schema()) {
    if (key.section() != section) {
      section = key.section();
      expected.push_back(std::string(section) + ":");
    }
    expected.push_back((section.empty() ? "" : "  ") + std::string(key.leaf()) + ": " +
                       formatValue(key.default_value));
  }
  std::vector<std::string> lines;
  std::istringstream in(yaml);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  EXPECT_EQ(lines, expected);
}

TEST(EmitTest, AwkwardValuesRoundTrip) {
  Experiment e;
  e.name = "x.y_z-1";
  e.data.dir = "dir with spaces/and: colon #hash 'quote' \"dq\" \\ back\ttab\nnewline é";
  e.checkpoint.dir = "true";
  e.comm.cost_model = "123";
  e.trainer.run_dir = "- dash";
  e.model.hidden = {};
  e.model.name = "torchscript:/models/net v2.pt";
  e.launch.nnodes = "2:8";
  e.launch.rdzv_endpoint = "[::1]:29400";
  e.launch.min_workers = 3;
  e.optimizer.lr = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  e.optimizer.eps = 5e-324;    // the smallest subnormal
  e.trainer.seed = 18446744073709551615ull;
  e.trainer.max_steps = 9223372036854775807;
  EXPECT_EQ(parseExperiment(toYaml(e), "toYaml"), e) << toYaml(e);
}

TEST(EmitTest, RandomExperimentsRoundTrip) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    Experiment e;
    e.name = "run" + std::to_string(trial);
    e.optimizer.lr = std::ldexp(unit(rng) + 1e-3, -static_cast<int>(rng() % 30));
    e.optimizer.momentum = unit(rng) * 0.999;
    e.optimizer.beta2 = 1.0 - std::ldexp(unit(rng) + 1e-3, -10);
    e.model.dropout = unit(rng) * 0.9;
    e.comm.timeout_seconds = unit(rng) * 1e6 + 1e-9;
    e.schedule.gamma = unit(rng) * 0.5 + 0.5;
    e.model.hidden.assign(rng() % 5, 0);
    for (int64_t& width : e.model.hidden) width = static_cast<int64_t>(rng() % 100000) + 1;
    e.trainer.grad_accumulation = static_cast<int64_t>(1 + rng() % 8);
    e.trainer.global_batch_size =
        e.trainer.grad_accumulation * static_cast<int64_t>(1 + rng() % 512);
    e.trainer.seed = rng();
    Experiment back = parseExperiment(toYaml(e), "toYaml");
    ASSERT_EQ(back, e) << toYaml(e);
  }
}

using cumulus::testing::readFile;

TEST(EmitTest, ConfigurationDocHoldsTheCurrentReferenceTable) {
  const std::string path = std::string(CUMULUS_SOURCE_DIR) + "/docs/configuration.md";
  std::string doc = readFile(path);
  ASSERT_FALSE(doc.empty()) << "cannot read " << path;
  std::optional<std::string> section = referenceSection(doc);
  ASSERT_TRUE(section.has_value())
      << path << " has no " << kReferenceBegin << " ... " << kReferenceEnd
      << " section; run: build/bin/cumulus-config reference --file docs/configuration.md";
  EXPECT_EQ(*section, referenceMarkdown())
      << "docs/configuration.md's configuration reference is stale; regenerate it with\n"
      << "  cmake --build build --target cumulus-config && "
         "build/bin/cumulus-config reference --file docs/configuration.md";
}

TEST(EmitTest, ReferenceTableHasOneRowPerKey) {
  std::string table = referenceMarkdown();
  std::istringstream lines(table);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "| key | type | default | allowed | meaning |");
  std::getline(lines, line);
  for (const KeySpec& key : schema()) {
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_EQ(line.rfind("| `" + std::string(key.path) + "` | ", 0), 0u) << line;
  }
  EXPECT_FALSE(std::getline(lines, line));
  EXPECT_NE(table.find("| `optimizer.lr` | number | `0.1` | > 0 | peak learning rate"),
            std::string::npos);
  EXPECT_NE(table.find("| `name` | string | required | "), std::string::npos);
}

TEST(EmitTest, ReferenceSectionIsReplacedOrAppended) {
  std::string table = referenceMarkdown();
  std::string fresh = withReferenceSection("# Title\ntext");
  EXPECT_EQ(fresh, "# Title\ntext\n\n## Configuration reference\n\n" +
                       std::string(kReferenceBegin) + "\n" + table + std::string(kReferenceEnd) +
                       "\n");
  std::string stale = "a\n" + std::string(kReferenceBegin) + "\nold table\n" +
                      std::string(kReferenceEnd) + "\nafter\n";
  EXPECT_EQ(withReferenceSection(stale), "a\n" + std::string(kReferenceBegin) + "\n" + table +
                                             std::string(kReferenceEnd) + "\nafter\n");
  EXPECT_EQ(referenceSection(stale), std::optional<std::string>("old table\n"));
  EXPECT_EQ(referenceSection("no markers"), std::nullopt);
}

}  // namespace
}  // namespace cumulus::configs
