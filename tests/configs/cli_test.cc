// The shared command line: PROGRAM CONFIG [--set K=V]... [--print-config] [declared flags].
#include <gtest/gtest.h>

#include "configs/cli.h"

namespace cumulus::configs {
namespace {

const CliSpec kSpec{
    "cumulus-train",
    "Trains one worker.",
    "CONFIG",
    true,
    {{"resume", "DIR", "resume from DIR"}, {"dry-run", "", "stop before training"}}};

std::string errorOf(const std::vector<std::string>& args, const CliSpec& spec = kSpec) {
  try {
    parseCommandLine(spec, args);
  } catch (const CliError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CliTest, ParsesPathOverridesAndFlagsInAnyOrder) {
  CliArgs args = parseCommandLine(
      kSpec, {"--set", "optimizer.lr=0.05", "exp.yaml", "--set=model.hidden=[512,256]",
              "--print-config", "--resume=/ckpt", "--dry-run", "--set", "name=a=b"});
  EXPECT_EQ(args.config_path, "exp.yaml");
  EXPECT_EQ(args.overrides,
            (std::vector<std::string>{"optimizer.lr=0.05", "model.hidden=[512,256]", "name=a=b"}));
  EXPECT_TRUE(args.print_config);
  EXPECT_FALSE(args.help);
  EXPECT_EQ(args.value("resume"), "/ckpt");
  EXPECT_TRUE(args.has("dry-run"));
  EXPECT_EQ(args.value("dry-run", "x"), "");
  EXPECT_FALSE(args.has("absent"));
  EXPECT_EQ(args.value("absent", "fallback"), "fallback");

  CliArgs spaced = parseCommandLine(kSpec, {"--resume", "/c", "--", "--odd-name.yaml"});
  EXPECT_EQ(spaced.value("resume"), "/c");
  EXPECT_EQ(spaced.config_path, "--odd-name.yaml");
}

TEST(CliTest, HelpNeedsNothingElse) {
  EXPECT_TRUE(parseCommandLine(kSpec, {"--help"}).help);
  EXPECT_TRUE(parseCommandLine(kSpec, {"-h", "a", "b"}).help);
  std::string usage = usageText(kSpec);
  EXPECT_EQ(usage.substr(0, usage.find('\n')),
            "usage: cumulus-train CONFIG [--set KEY=VALUE]... [--print-config] [flags]");
  EXPECT_NE(usage.find("  --resume DIR" + std::string(14, ' ') + "resume from DIR\n"),
            std::string::npos);
  EXPECT_NE(usage.find("  --dry-run" + std::string(17, ' ') + "stop before training\n"),
            std::string::npos);
}

TEST(CliTest, MistakesAreNamed) {
  const std::string help = " (cumulus-train --help shows the usage)";
  EXPECT_EQ(errorOf({"x.yaml", "--prnt-config"}),
            "cumulus-train: unknown flag --prnt-config; did you mean --print-config?" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--bogus"}), "cumulus-train: unknown flag --bogus" + help);
  EXPECT_EQ(errorOf({"x.yaml", "-x"}), "cumulus-train: unknown flag -x" + help);
  EXPECT_EQ(errorOf({}), "cumulus-train: missing CONFIG, the experiment file" + help);
  EXPECT_EQ(errorOf({"a.yaml", "b.yaml"}),
            "cumulus-train: unexpected argument \"b.yaml\"; cumulus-train takes one CONFIG" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--set"}), "cumulus-train: --set needs a value KEY=VALUE" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--set", "optimizer.lr"}),
            "cumulus-train: --set optimizer.lr: expected KEY=VALUE, e.g. --set "
            "optimizer.lr=0.05" +
                help);
  EXPECT_EQ(errorOf({"x.yaml", "--resume"}), "cumulus-train: --resume needs a value DIR" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--dry-run=yes"}), "cumulus-train: --dry-run takes no value" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--print-config=1"}),
            "cumulus-train: --print-config takes no value" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--resume", "a", "--resume", "b"}),
            "cumulus-train: --resume is given twice" + help);
}

TEST(CliTest, OptionalOrNoPositional) {
  CliSpec optional = kSpec;
  optional.positional_required = false;
  EXPECT_EQ(parseCommandLine(optional, {"--set", "a.b=1"}).config_path, "");
  CliSpec none = kSpec;
  none.positional = "";
  EXPECT_EQ(errorOf({"x.yaml"}, none),
            "cumulus-train: unexpected argument \"x.yaml\" (cumulus-train --help shows the usage)");
  const char* argv[] = {"cumulus-train", "x.yaml", "--set", "a.b=1"};
  CliArgs from_argv = parseCommandLine(kSpec, 4, argv);
  EXPECT_EQ(from_argv.config_path, "x.yaml");
  EXPECT_EQ(from_argv.overrides, std::vector<std::string>{"a.b=1"});
}

}  // namespace
}  // namespace cumulus::configs
