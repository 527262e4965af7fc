// --set overrides: parsed as YAML, validated like file values, applied after the file in order.
#include <gtest/gtest.h>

#include "configs/parse.h"
#include "tests/configs/test_util.h"

namespace cumulus::configs {
namespace {

using testing::errorOf;
using testing::kMinimal;

TEST(OverrideTest, AppliesAfterTheFileInOrder) {
  Experiment e = parseExperiment(
      "name: t\noptimizer: {lr: 0.5}\n", "x.yaml",
      {"optimizer.lr=0.05", "model.hidden=[512,256]", "trainer.seed=7", "optimizer.lr=0.01",
       "data.shuffle=false", "launch.nnodes=1:4", "model.name=torchscript:/tmp/m.pt"});
  EXPECT_EQ(e.optimizer.lr, 0.01);
  EXPECT_EQ(e.model.hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(e.trainer.seed, 7u);
  EXPECT_FALSE(e.data.shuffle);
  EXPECT_EQ(e.launch.nnodes, "1:4");
  EXPECT_EQ(e.model.name, "torchscript:/tmp/m.pt");
}

TEST(OverrideTest, BlockAndFlowValues) {
  Experiment e = parseExperiment(kMinimal, "x.yaml",
                                 {"optimizer={name: adamw, lr: 0.001}", "model.hidden=[]",
                                  "checkpoint.dir=", "name=renamed", "data.dir=/a b/c"});
  EXPECT_EQ(e.optimizer.name, OptimizerName::kAdamw);
  EXPECT_EQ(e.optimizer.lr, 0.001);
  EXPECT_EQ(e.optimizer.momentum, OptimizerConfig{}.momentum);
  EXPECT_TRUE(e.model.hidden.empty());
  EXPECT_EQ(e.checkpoint.dir, "");
  EXPECT_EQ(e.name, "renamed");
  EXPECT_EQ(e.data.dir, "/a b/c");
}

TEST(OverrideTest, SatisfiesARequiredKey) {
  EXPECT_EQ(parseExperiment("model: {name: mlp}\n", "x.yaml", {"name=from-cli"}).name, "from-cli");
}

TEST(OverrideTest, ErrorsNameTheOverride) {
  EXPECT_EQ(errorOf(kMinimal, {"optimizer.lr=abc"}),
            "--set optimizer.lr=abc: optimizer.lr: expected a number > 0, got \"abc\"");
  EXPECT_EQ(errorOf(kMinimal, {"optimizer.lr=-1"}),
            "--set optimizer.lr=-1: optimizer.lr: expected a number > 0, got -1");
  EXPECT_EQ(errorOf(kMinimal, {"trainer.lr=0.1"}),
            "--set trainer.lr=0.1: trainer.lr: unknown key; did you mean `optimizer.lr`?");
  EXPECT_EQ(errorOf(kMinimal, {"optimiser.lr=0.1"}),
            "--set optimiser.lr=0.1: optimiser.lr: unknown key; did you mean `optimizer.lr`?");
  EXPECT_EQ(errorOf(kMinimal, {"optimizer.lr"}),
            "--set optimizer.lr: expected KEY=VALUE, e.g. --set optimizer.lr=0.05");
  EXPECT_EQ(errorOf(kMinimal, {"=1"}),
            "--set =1: expected KEY=VALUE, e.g. --set optimizer.lr=0.05");
  EXPECT_EQ(errorOf(kMinimal, {"model.hidden=[1,2"}),
            "--set model.hidden=[1,2: model.hidden: invalid YAML: end of sequence flow not found "
            "(column 1 of the value)");
  EXPECT_EQ(
      errorOf(kMinimal, {"model.hidden=[1,x]"}),
      "--set model.hidden=[1,x]: model.hidden[1]: expected an integer in [1, 1048576], got \"x\"");
  EXPECT_EQ(errorOf(kMinimal, {"optimizer={lr: 1, bogus: 2}"}),
            "--set optimizer={lr: 1, bogus: 2}: optimizer.bogus: unknown key; the keys of "
            "optimizer are name, lr, momentum, nesterov, weight_decay, beta1, beta2, eps");
  EXPECT_EQ(errorOf(kMinimal, {"optimizer.lr="}),
            "--set optimizer.lr=: optimizer.lr: expected a number > 0, got nothing");
  EXPECT_EQ(
      errorOf(kMinimal, {"model.hidden=&a [1]"}),
      "--set model.hidden=&a [1]: model.hidden: YAML anchors (&name) and aliases (*name) "
      "are not allowed in experiment files; write the value out in full (column 1 of the value)");
}

TEST(OverrideTest, CrossFieldErrorsBlameTheOverride) {
  EXPECT_EQ(errorOf("name: t\ntrainer: {grad_accumulation: 4}\n", {"trainer.global_batch_size=10"}),
            "--set trainer.global_batch_size=10: trainer.global_batch_size: 10 is not a multiple "
            "of trainer.grad_accumulation (4); the micro-batches of a step must be equal");
  // A later override can repair what an earlier value broke: checks run after all of them.
  EXPECT_EQ(errorOf("name: t\ntrainer: {grad_accumulation: 3}\n", {"trainer.global_batch_size=96"}),
            "(no error)");
}

}  // namespace
}  // namespace cumulus::configs
