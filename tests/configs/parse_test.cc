// parseExperiment on good files and on each class of bad file, with the exact message.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "configs/parse.h"
#include "configs/schema.h"
#include "tests/configs/test_util.h"

namespace cumulus::configs {
namespace {

using testing::errorOf;

TEST(ParseTest, ReadsEveryKindOfValue) {
  const char* text = R"(# Fashion-MNIST on four workers
name: fashion-mlp
model:
  name: mlp
  hidden: [512, 256]
  dropout: 0.1
data:
  dataset: synthetic
  synthetic_train_samples: 1024
optimizer:
  name: adamw
  lr: 3e-4
  weight_decay: 0.01
  eps: +1.0E-6
schedule: {name: cosine, warmup_steps: 100, min_lr: 1.0e-5}
trainer:
  global_batch_size: 256
  grad_accumulation: 2
  seed: 18446744073709551615
  max_steps: 1e4
  run_dir: "runs/fashion mlp"
checkpoint:
  dir: ''
  async: False
launch:
  nnodes: 1:4
  rdzv_endpoint: node0:29400
optimizer.nesterov: true   # dotted keys work at the top level too
)";
  Experiment e = parseExperiment(text, "x.yaml");
  EXPECT_EQ(e.name, "fashion-mlp");
  EXPECT_EQ(e.model.hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(e.model.dropout, 0.1);
  EXPECT_EQ(e.data.dataset, Dataset::kSynthetic);
  EXPECT_EQ(e.data.synthetic_train_samples, 1024);
  EXPECT_EQ(e.optimizer.name, OptimizerName::kAdamw);
  EXPECT_EQ(e.optimizer.lr, 3e-4);
  EXPECT_EQ(e.optimizer.eps, 1e-6);
  EXPECT_TRUE(e.optimizer.nesterov);
  EXPECT_EQ(e.schedule.name, ScheduleName::kCosine);
  EXPECT_EQ(e.schedule.warmup_steps, 100);
  EXPECT_EQ(e.schedule.min_lr, 1e-5);
  EXPECT_EQ(e.trainer.global_batch_size, 256);
  EXPECT_EQ(e.trainer.seed, 18446744073709551615ull);
  EXPECT_EQ(e.trainer.max_steps, 10000);
  EXPECT_EQ(e.trainer.run_dir, "runs/fashion mlp");
  EXPECT_EQ(e.checkpoint.dir, "");
  EXPECT_FALSE(e.checkpoint.async);
  EXPECT_EQ(e.launch.nnodes, "1:4");
  EXPECT_EQ(e.launch.rdzv_endpoint, "node0:29400");
  // Everything not written keeps its default.
  Experiment defaults;
  EXPECT_EQ(e.comm, defaults.comm);
  EXPECT_EQ(e.eval, defaults.eval);
  EXPECT_EQ(e.optimizer.momentum, defaults.optimizer.momentum);
}

TEST(ParseTest, OptionNamesBecomeTypedValues) {
  Experiment e =
      parseExperiment("name: t\ncomm: {algorithm: hierarchical, compression: bf16}\n", "x.yaml");
  EXPECT_EQ(e.comm.algorithm, Algorithm::kHierarchical);
  EXPECT_EQ(e.comm.compression, Compression::kBf16);
  EXPECT_EQ(Experiment().comm.algorithm, Algorithm::kAuto);
  EXPECT_EQ(Experiment().comm.compression, Compression::kNone);
  e = parseExperiment(
      "name: t\ndata: {format: tokens, train: a.npy, test: b.npy, dataset: mnist}\n"
      "loss: {name: module}\noptimizer: {name: adamw}\nschedule: {name: step}\n"
      "trainer: {balance: auto}\n",
      "x.yaml");
  EXPECT_EQ(e.data.format, DataFormat::kTokens);
  EXPECT_EQ(e.data.dataset, Dataset::kMnist);
  EXPECT_EQ(e.loss.name, LossName::kModule);
  EXPECT_EQ(e.optimizer.name, OptimizerName::kAdamw);
  EXPECT_EQ(e.schedule.name, ScheduleName::kStep);
  EXPECT_EQ(e.trainer.balance, BalanceMode::kAuto);
  // Every name of every typed key round-trips, and the schema's choices are exactly those names.
  for (const auto& [value, name] : enumNames(Dataset{})) {
    EXPECT_EQ(base::valueNamed<Dataset>(name), value);
    EXPECT_STREQ(base::nameOf(value), name);
  }
  EXPECT_EQ(base::valueNamed<Dataset>("Fashion-MNIST"), std::nullopt);
  const auto choices = [](std::string_view key) { return findKey(key)->choices; };
  EXPECT_EQ(choices("data.format"), base::namesOf<DataFormat>());
  EXPECT_EQ(choices("data.dataset"), base::namesOf<Dataset>());
  EXPECT_EQ(choices("loss.name"), base::namesOf<LossName>());
  EXPECT_EQ(choices("optimizer.name"), base::namesOf<OptimizerName>());
  EXPECT_EQ(choices("schedule.name"), base::namesOf<ScheduleName>());
  EXPECT_EQ(choices("trainer.balance"), base::namesOf<BalanceMode>());
  EXPECT_EQ(choices("trainer.sync"), base::namesOf<SyncMode>());
  EXPECT_EQ(choices("trainer.precision"), base::namesOf<Precision>());
  EXPECT_EQ(choices("comm.algorithm"), base::namesOf<Algorithm>());
  EXPECT_EQ(choices("diloco.outer_compression"), base::namesOf<Compression>());
  EXPECT_EQ(choices("launch.recovery"), base::namesOf<Recovery>());
  // int8 is DiLoCo's outer gradients' only.
  EXPECT_EQ(choices("comm.compression"), (std::vector<std::string_view>{"none", "bf16"}));
}

TEST(ParseTest, EmptySectionMeansDefaults) {
  Experiment e = parseExperiment("name: t\noptimizer:\n# lr: 0.5\n", "x.yaml");
  EXPECT_EQ(e.optimizer, OptimizerConfig{});
}

TEST(ParseTest, TorchScriptModelNeedsAPath) {
  EXPECT_EQ(parseExperiment("name: t\nmodel: {name: 'torchscript:/m/x.pt'}\n", "x").model.name,
            "torchscript:/m/x.pt");
  EXPECT_EQ(errorOf("name: t\nmodel: {name: resnet}\n"),
            "x.yaml:2:15: model.name: expected one of mlp, convnet, torchscript:<path>, got "
            "\"resnet\"");
  EXPECT_EQ(errorOf("name: t\nmodel: {name: 'torchscript:'}\n"),
            "x.yaml:2:15: model.name: expected one of mlp, convnet, torchscript:<path>, got "
            "\"torchscript:\"; name the file after the colon, e.g. torchscript:model.pt");
}

TEST(ParseTest, UnknownKeySuggestsTheClosestKnownKey) {
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lrr: 0.1\n"),
            "x.yaml:3:3: optimizer.lrr: unknown key; did you mean `optimizer.lr`?");
  EXPECT_EQ(errorOf("name: t\ntrainer:\n  lr: 0.1\n"),
            "x.yaml:3:3: trainer.lr: unknown key; did you mean `optimizer.lr`?");
  EXPECT_EQ(errorOf("name: t\nlr: 0.1\n"),
            "x.yaml:2:1: lr: unknown key; did you mean `optimizer.lr`?");
  EXPECT_EQ(errorOf("name: t\noptimiser:\n  lr: 0.1\n"),
            "x.yaml:2:1: optimiser: unknown key; did you mean `optimizer`?");
  EXPECT_EQ(errorOf("name: t\ntrainer:\n  global_batchsize: 64\n"),
            "x.yaml:3:3: trainer.global_batchsize: unknown key; did you mean "
            "`trainer.global_batch_size`?");
  EXPECT_EQ(errorOf("name: t\ntrainer:\n  name: x\n"),
            "x.yaml:3:3: trainer.name: unknown key; did you mean `name`, `model.name`, "
            "`loss.name`, `optimizer.name` or `schedule.name`?");
  EXPECT_EQ(errorOf("name: t\neval:\n  zzz: 1\n"),
            "x.yaml:3:3: eval.zzz: unknown key; the keys of eval are every_steps, batch_size");
}

TEST(ParseTest, WrongTypeNamesWhatWasExpectedAndWhatCame) {
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: fast\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got \"fast\"");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: [1, 2]\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got a list");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: {a: 1}\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got a mapping");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: \"0.1\"\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got the string \"0.1\"; remove the "
            "quotes");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: .inf\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got \".inf\"");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: 1e999\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got 1e999, which is out of range");
  EXPECT_EQ(errorOf("name: t\ntrainer: {epochs: 2.5}\n"),
            "x.yaml:2:19: trainer.epochs: expected an integer >= 1, got 2.5");
  EXPECT_EQ(errorOf("name: t\ntrainer: {seed: 18446744073709551616}\n"),
            "x.yaml:2:17: trainer.seed: expected a non-negative integer, got "
            "18446744073709551616, which is out of range");
  EXPECT_EQ(errorOf("name: t\ntrainer: {seed: -1}\n"),
            "x.yaml:2:17: trainer.seed: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(errorOf("name: t\ndata: {shuffle: yes}\n"),
            "x.yaml:2:17: data.shuffle: expected true or false, got \"yes\"");
  EXPECT_EQ(
      errorOf("name: t\nmodel: {hidden: 256}\n"),
      "x.yaml:2:17: model.hidden: expected a list of integers in [1, 1048576], got \"256\", e.g. "
      "[256, 128, 100]");
  EXPECT_EQ(errorOf("name: t\nmodel: {hidden: [256, abc]}\n"),
            "x.yaml:2:23: model.hidden[1]: expected an integer in [1, 1048576], got \"abc\"");
  EXPECT_EQ(errorOf("name: t\noptimizer: adam\n"),
            "x.yaml:2:12: optimizer: expected a mapping of optimizer keys (name, lr, momentum, "
            "nesterov, weight_decay, beta1, beta2, eps), got \"adam\"");
  EXPECT_EQ(
      errorOf("name: t\ncheckpoint:\n  dir: ~\n"),
      "x.yaml:3:8: checkpoint.dir: expected a string, got nothing; write \"\" for an empty string");
}

TEST(ParseTest, EmptyValueIsNothing) {
  std::string message = errorOf("name: t\noptimizer:\n  lr:\n  momentum: 0.5\n");
  EXPECT_EQ(message.substr(message.find(": ")),
            ": optimizer.lr: expected a number > 0, got nothing");
}

// The sizes that the code multiplies by each other and by a sample's bytes have a cap, so that no
// product wraps around into a negative size far from the key that caused it.
TEST(ParseTest, SizesThatAreMultipliedLaterHaveACap) {
  struct Cap {
    std::string section, leaf;
    int64_t max;
  };
  const std::vector<Cap> caps = {{"model", "num_classes", 1048576},
                                 {"data", "seq_len", 1048576},
                                 {"data", "synthetic_train_samples", 1000000000},
                                 {"data", "synthetic_test_samples", 1000000000},
                                 {"trainer", "global_batch_size", 1000000000},
                                 {"eval", "batch_size", 1000000000},
                                 {"diloco", "inner_steps", 1000000000},
                                 {"launch", "nproc_per_node", 4096}};
  for (const Cap& cap : caps) {
    const auto with = [&](int64_t value) {
      return errorOf("name: t\n" + cap.section + ": {" + cap.leaf + ": " + std::to_string(value) +
                     "}\n");
    };
    EXPECT_EQ(with(cap.max), "(no error)") << cap.leaf;
    const std::string column = std::to_string(cap.section.size() + cap.leaf.size() + 6);
    const std::string range = "in [1, " + std::to_string(cap.max) + "]";
    EXPECT_EQ(with(cap.max + 1), "x.yaml:2:" + column + ": " + cap.section + "." + cap.leaf +
                                     ": expected an integer " + range + ", got " +
                                     std::to_string(cap.max + 1));
    EXPECT_EQ(with(INT64_MAX), "x.yaml:2:" + column + ": " + cap.section + "." + cap.leaf +
                                   ": expected an integer " + range + ", got 9223372036854775807");
  }
  EXPECT_EQ(errorOf("name: t\nmodel: {hidden: [1048576, 1048577]}\n"),
            "x.yaml:2:17: model.hidden: expected a list of integers in [1, 1048576], got "
            "[1048576, 1048577]");
}

// diloco.outer_lr: 1 without momentum moves the global parameters to the replicas' average;
// 1e308 made every parameter infinite at the first outer step.
TEST(ParseTest, TheOuterLearningRateIsAtMostTen) {
  EXPECT_EQ(errorOf("name: t\ndiloco: {outer_lr: 10}\n"), "(no error)");
  EXPECT_EQ(errorOf("name: t\ndiloco: {outer_lr: 10.5}\n"),
            "x.yaml:2:20: diloco.outer_lr: expected a number in (0, 10], got 10.5");
  EXPECT_EQ(errorOf("name: t\ndiloco: {outer_lr: 1e308}\n"),
            "x.yaml:2:20: diloco.outer_lr: expected a number in (0, 10], got 1.0e+308");
}

TEST(ParseTest, OutOfRangeValues) {
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: -1\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got -1");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: 0\n"),
            "x.yaml:3:7: optimizer.lr: expected a number > 0, got 0");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  momentum: 1\n"),
            "x.yaml:3:13: optimizer.momentum: expected a number in [0, 1), got 1");
  EXPECT_EQ(
      errorOf("name: t\ntrainer:\n  global_batch_size: 0\n"),
      "x.yaml:3:22: trainer.global_batch_size: expected an integer in [1, 1000000000], got 0");
  EXPECT_EQ(errorOf("name: t\nschedule:\n  warmup_steps: -1\n"),
            "x.yaml:3:17: schedule.warmup_steps: expected an integer >= 0, got -1");
  EXPECT_EQ(errorOf("name: t\nmodel: {hidden: [256, 0]}\n"),
            "x.yaml:2:17: model.hidden: expected a list of integers in [1, 1048576], got [256, 0]");
  EXPECT_EQ(errorOf("name: t\noptimizer: {name: adm}\n"),
            "x.yaml:2:19: optimizer.name: expected one of sgd, adamw, got \"adm\"; did you mean "
            "`adamw`?");
  EXPECT_EQ(errorOf("name: t\ncomm: {algorithm: rign}\n"),
            "x.yaml:2:19: comm.algorithm: expected one of funnel, tree, ring, hierarchical, auto, "
            "got \"rign\"; did you mean `ring`?");
  EXPECT_EQ(errorOf("name: t\ncomm: {compression: fp8}\n"),
            "x.yaml:2:21: comm.compression: expected one of none, bf16, got \"fp8\"");
  EXPECT_EQ(errorOf("name: t\nschedule: {name: linear}\n"),
            "x.yaml:2:18: schedule.name: expected one of constant, step, cosine, got \"linear\"");
  EXPECT_EQ(errorOf("name: t\nloss: {name: mae}\n"),
            "x.yaml:2:14: loss.name: expected one of cross_entropy, mse, module, got \"mae\"; did "
            "you mean `mse`?");
  EXPECT_EQ(errorOf("name: t\ndata: {format: csv}\n"),
            "x.yaml:2:16: data.format: expected one of idx, npy, tokens, got \"csv\"");
  EXPECT_EQ(errorOf("name: t\ntrainer: {balance: on}\n"),
            "x.yaml:2:20: trainer.balance: expected one of off, auto, fixed, got \"on\"; did you "
            "mean `off`?");
}

TEST(ParseTest, FormattedStrings) {
  auto nnodes = [](const std::string& value) {
    return errorOf("name: t\nlaunch:\n  nnodes: \"" + value + "\"\n");
  };
  const std::string prefix =
      "x.yaml:3:11: launch.nnodes: expected N or MIN:MAX, with 1 <= MIN <= MAX <= 65536, got ";
  EXPECT_EQ(nnodes("4:2"), prefix + "\"4:2\" (MIN 4 is greater than MAX 2)");
  EXPECT_EQ(nnodes("0"), prefix + "\"0\" (N must be at least 1)");
  EXPECT_EQ(nnodes("0:2"), prefix + "\"0:2\" (MIN must be at least 1)");
  EXPECT_EQ(nnodes("a:b"), prefix + "\"a:b\" (MIN and MAX must be whole numbers)");
  EXPECT_EQ(nnodes("two"), prefix + "\"two\" (N is not a whole number)");
  EXPECT_EQ(nnodes("65537"), prefix + "\"65537\" (N must be at most 65536)");
  EXPECT_EQ(nnodes("1:65537"), prefix + "\"1:65537\" (MAX must be at most 65536)");
  EXPECT_EQ(nnodes("2:2"), "(no error)");
  EXPECT_EQ(errorOf("name: t\nlaunch: {rdzv_endpoint: node0}\n"),
            "x.yaml:2:25: launch.rdzv_endpoint: expected empty or host:port, got \"node0\" (it "
            "has no ':' before the port)");
  EXPECT_EQ(errorOf("name: t\nlaunch: {rdzv_endpoint: 'node0:70000'}\n"),
            "x.yaml:2:25: launch.rdzv_endpoint: expected empty or host:port, got \"node0:70000\" "
            "(the port after the last ':' must be in 1..65535)");
  EXPECT_EQ(errorOf("name: my run\n"),
            "x.yaml:1:7: name: expected a run name of letters, digits, '.', '_' and '-' (at most "
            "128), got \"my run\" (it holds ' ')");
}

TEST(ParseTest, MissingRequiredKey) {
  EXPECT_EQ(errorOf("# comment\nmodel: {name: mlp}\n"),
            "x.yaml:2:1: name: missing; every experiment needs one, e.g. `name: fashion-mlp` at "
            "the top level");
}

TEST(ParseTest, EmptyOrNonMappingFile) {
  const std::string empty =
      "x.yaml:1:1: the file has no settings; an experiment needs at least `name: <run name>`";
  EXPECT_EQ(errorOf(""), empty);
  EXPECT_EQ(errorOf("# nothing but a comment\n\n"), empty);
  EXPECT_EQ(errorOf("---\n"), empty);
  EXPECT_EQ(errorOf("- a\n- b\n"),
            "x.yaml:1:1: expected a mapping of experiment keys (name, model, data, ...) at the top "
            "level, got a list");
  EXPECT_EQ(errorOf("hello\n"),
            "x.yaml:1:1: expected a mapping of experiment keys (name, model, data, ...) at the top "
            "level, got \"hello\"");
}

TEST(ParseTest, DuplicateKeys) {
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  lr: 0.1\n  lr: 0.2\n"),
            "x.yaml:4:3: optimizer.lr: duplicate key (first at line 3, column 3); keep one");
  EXPECT_EQ(errorOf("name: t\noptimizer.lr: 0.1\noptimizer:\n  lr: 0.2\n"),
            "x.yaml:4:3: optimizer.lr: set twice (first at x.yaml:2:1); keep one");
  EXPECT_EQ(errorOf("name: t\nname: u\n"),
            "x.yaml:2:1: name: duplicate key (first at line 1, column 1); keep one");
}

TEST(ParseTest, KeysMustBeNames) {
  EXPECT_EQ(errorOf("name: t\n? [a, b]\n: 1\n"), "x.yaml:2:3: keys must be names, got a list");
}

TEST(ParseTest, MalformedYamlKeepsYamlCppPosition) {
  EXPECT_EQ(errorOf("name: t\noptimizer: {lr: 0.1\n"),
            "x.yaml:3:1: invalid YAML: end of map flow not found");
  EXPECT_EQ(errorOf("name: t\n  lr: 0.1\n"), "x.yaml:2:5: invalid YAML: illegal map value");
  EXPECT_EQ(errorOf("name: t\n\tlr: 1\n"),
            "x.yaml:2:1: invalid YAML: illegal tab when looking for indentation");
  // yaml-cpp's own words for a tab under a key never say "tab"; ours do.
  EXPECT_EQ(errorOf("name: t\noptimizer:\n\tlr: 0.1\n"),
            "x.yaml:3:4: invalid YAML: illegal map value (line 3 is indented with a tab; YAML "
            "indents with spaces only)");
  EXPECT_EQ(errorOf("name: t\noptimizer:\n  \tlr: 0.1\n  momentum: 0.9\n"),
            "x.yaml:3:6: invalid YAML: illegal map value (line 3 is indented with a tab; YAML "
            "indents with spaces only)");
  // A tab inside a value is no indentation: no hint.
  EXPECT_EQ(errorOf("name: t\n  lr: \"\t\"\n"), "x.yaml:2:5: invalid YAML: illegal map value");
  EXPECT_EQ(errorOf("name: t\nx: \"a\\q\"\n"),
            "x.yaml:2:8: invalid YAML: unknown escape character: q");
}

TEST(ParseTest, TagsAreRejected) {
  EXPECT_EQ(errorOf("name: !!str t\n"),
            "x.yaml:1:7: name: YAML tags (tag:yaml.org,2002:str) are not allowed in experiment "
            "files; remove the tag (quote the value if it must be a string)");
}

TEST(ParseTest, CrossFieldChecksBlameTheKeySetLast) {
  EXPECT_EQ(errorOf("name: t\ntrainer:\n  global_batch_size: 128\n  grad_accumulation: 3\n"),
            "x.yaml:4:22: trainer.grad_accumulation: 3 does not divide trainer.global_batch_size "
            "(128); the micro-batches of a step must be equal, so pick a divisor of 128");
  EXPECT_EQ(errorOf("name: t\ntrainer:\n  grad_accumulation: 3\n  global_batch_size: 100\n"),
            "x.yaml:4:22: trainer.global_batch_size: 100 is not a multiple of "
            "trainer.grad_accumulation (3); the micro-batches of a step must be equal");
  EXPECT_EQ(errorOf("name: t\ntrainer:\n  grad_accumulation: 4\n"), "(no error)");
  EXPECT_EQ(errorOf("name: t\ncomm: {first_bucket_mb: 32}\n"),
            "x.yaml:2:25: comm.first_bucket_mb: 32 is over comm.bucket_cap_mb (25); make it at "
            "most that");
  EXPECT_EQ(errorOf("name: t\ncomm: {bucket_cap_mb: 0.5}\n"),
            "x.yaml:2:23: comm.bucket_cap_mb: 0.5 is under comm.first_bucket_mb (1); make it at "
            "least that");
  EXPECT_EQ(errorOf("name: t\nschedule: {name: cosine, min_lr: 0.5}\n"),
            "x.yaml:2:34: schedule.min_lr: 0.5 is above optimizer.lr (0.1); the cosine schedule "
            "decays from lr down to min_lr");
  EXPECT_EQ(errorOf("name: t\nschedule: {name: step, min_lr: 0.5}\n"), "(no error)");
  EXPECT_EQ(errorOf("name: t\ndata: {dataset: synthetic, synthetic_train_samples: 100}\n"),
            "x.yaml:2:53: data.synthetic_train_samples: 100 is less than "
            "trainer.global_batch_size (128), so with data.drop_last no step would run");
  EXPECT_EQ(errorOf("name: t\ndata: {dataset: synthetic, synthetic_train_samples: 100, "
                    "drop_last: false}\n"),
            "(no error)");
  // npy and tokens name their files; the format is blamed when a path was never set.
  EXPECT_EQ(errorOf("name: t\ndata: {format: npy, test: d/test}\n"),
            "x.yaml:2:16: data.train: required when data.format is npy; name a directory with "
            "inputs.npy and targets.npy");
  EXPECT_EQ(errorOf("name: t\ndata: {format: tokens, train: a.npy, test: \"\"}\n"),
            "x.yaml:2:44: data.test: required when data.format is tokens; name a 1-D .npy file "
            "of token ids");
  EXPECT_EQ(errorOf("name: t\ndata: {format: tokens, train: a.npy, test: b.npy, seq_len: 0}\n"),
            "x.yaml:2:60: data.seq_len: expected an integer in [1, 1048576], got 0");
  EXPECT_EQ(errorOf("name: t\ndata: {format: npy, train: a, test: b, dataset: synthetic, "
                    "synthetic_train_samples: 100}\nloss: {name: mse}\n"),
            "(no error)");
  EXPECT_EQ(errorOf("name: t\nloss: {name: mae}\n"),
            "x.yaml:2:14: loss.name: expected one of cross_entropy, mse, module, got \"mae\"; "
            "did you mean `mse`?");
}

// trainer.sync: diloco. Each bad value exits 2 naming the key and what is allowed.
TEST(ParseTest, DilocoKeysSayWhatIsAllowed) {
  EXPECT_EQ(errorOf("name: t\ntrainer: {sync: diloco}\ndiloco: {inner_steps: 0}\n"),
            "x.yaml:3:23: diloco.inner_steps: expected an integer in [1, 1000000000], got 0");
  EXPECT_EQ(
      errorOf("name: t\ndiloco: {outer_compression: int4}\n"),
      "x.yaml:2:29: diloco.outer_compression: expected one of none, bf16, int8, got \"int4\"; "
      "did you mean `int8`?");
  EXPECT_EQ(errorOf("name: t\ntrainer: {sync: every step}\n"),
            "x.yaml:2:17: trainer.sync: expected one of every_step, diloco, got \"every step\"; "
            "did you mean `every_step`?");
  EXPECT_EQ(errorOf("name: t\ntrainer: {sync: diloco}\ncomm: {algorithm: funnel}\n"),
            "x.yaml:3:19: comm.algorithm: funnel cannot carry DiLoCo's outer syncs (trainer.sync: "
            "diloco): the parameter server holds one copy of the gradients; use ring, tree, "
            "hierarchical or auto");
  EXPECT_EQ(errorOf("name: t\ncomm: {algorithm: funnel}\ntrainer: {sync: diloco}\n"),
            "x.yaml:3:17: trainer.sync: diloco needs a peer-to-peer all-reduce, but comm.algorithm "
            "is funnel (a parameter server); set comm.algorithm to ring, tree, hierarchical or "
            "auto");
  EXPECT_EQ(errorOf("name: t\ntrainer: {sync: diloco}\ncomm: {compression: bf16}\n"),
            "x.yaml:3:21: comm.compression: bf16 compresses every step's gradients, which "
            "trainer.sync: diloco does not send; compress the outer gradients with "
            "diloco.outer_compression instead");
  EXPECT_EQ(errorOf("name: t\ndiloco: {inner_steps: 4, fragments: 5}\n"),
            "x.yaml:2:37: diloco.fragments: 5 is more than diloco.inner_steps (4): each fragment "
            "syncs at a step of its own within a round, so use at most 4");
  EXPECT_EQ(errorOf("name: t\ndiloco: {outer_momentum: 0}\n"),
            "x.yaml:2:26: diloco.outer_momentum: 0 leaves diloco.nesterov (true) no momentum; set "
            "nesterov: false");
  EXPECT_EQ(errorOf("name: t\ndiloco: {outer_momentum: 0, nesterov: false}\n"), "(no error)");
  EXPECT_EQ(errorOf("name: t\ntrainer: {sync: diloco}\ndiloco: {fragments: 4, overlap: true, "
                    "outer_compression: int8}\n"),
            "(no error)");
}

TEST(ParseTest, LoadExperimentReportsUnreadableFiles) {
  try {
    loadExperiment("/nonexistent/x.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "/nonexistent/x.yaml: cannot read the experiment file: No such file or directory");
  }
  try {
    loadExperiment("/tmp");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "/tmp: is a directory; name an experiment .yaml file");
  }
  // No writer ever opens the FIFO: a blocking open would hang this test.
  char dir[] = "/tmp/cumulus_parse_fifo_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/x.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    loadExperiment(fifo);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), fifo + ": is a FIFO, not a regular file");
  }
  std::filesystem::remove_all(dir);
}

// The example experiments shipped in configs/ must stay valid as the schema changes.
TEST(ParseTest, ExampleExperimentsAreValid) {
  int checked = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(CUMULUS_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    try {
      loadExperiment(entry.path().string());
    } catch (const ConfigError& e) {
      ADD_FAILURE() << e.what();
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no configs/*.yaml in this checkout";
}

}  // namespace
}  // namespace cumulus::configs
