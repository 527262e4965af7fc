// The experiment part of a command line: PROGRAM CONFIG [--set K=V]... [--print-config], on the
// shared CLI11 layout (base/command_line.h).
#include "configs/cli.h"

#include <gtest/gtest.h>

#include <sstream>

namespace cumulus::configs {
namespace {

struct Parsed {
  ExperimentArgs args;
  std::string resume;
  bool dry_run = false;
  bool finished = false;  // false: --help was printed
  std::string help;
};

Parsed parse(const std::vector<std::string>& argv) {
  CLI::App app{"Trains one worker.", "cumulus-train"};
  base::setUpCommandLine(app);
  Parsed parsed;
  addExperimentArgs(app, parsed.args);
  app.add_option("--resume", parsed.resume, "resume from DIR")->type_name("DIR");
  app.add_flag("--dry-run", parsed.dry_run, "stop before training");
  std::ostringstream help;
  parsed.finished = base::parseCommandLine(app, argv, help);
  parsed.help = help.str();
  return parsed;
}

std::string errorOf(const std::vector<std::string>& argv) {
  try {
    parse(argv);
  } catch (const base::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CliTest, ParsesPathOverridesAndFlagsInAnyOrder) {
  const Parsed p = parse({"--set", "optimizer.lr=0.05", "exp.yaml", "--set=model.hidden=[512,256]",
                          "--print-config", "--resume=/ckpt", "--dry-run", "--set", "name=a=b"});
  ASSERT_TRUE(p.finished);
  EXPECT_EQ(p.args.config_path, "exp.yaml");
  EXPECT_EQ(p.args.overrides,
            (std::vector<std::string>{"optimizer.lr=0.05", "model.hidden=[512,256]", "name=a=b"}));
  EXPECT_TRUE(p.args.print_config);
  EXPECT_EQ(p.resume, "/ckpt");
  EXPECT_TRUE(p.dry_run);

  const Parsed spaced = parse({"--resume", "/c", "--", "--odd-name.yaml"});
  EXPECT_EQ(spaced.resume, "/c");
  EXPECT_EQ(spaced.args.config_path, "--odd-name.yaml");
  EXPECT_FALSE(spaced.args.print_config);
}

TEST(CliTest, HelpNeedsNothingElseAndListsEveryFlag) {
  const Parsed p = parse({"--help"});
  EXPECT_FALSE(p.finished);
  EXPECT_FALSE(parse({"-h", "a", "b"}).finished);
  EXPECT_EQ(p.help.substr(0, p.help.find('\n')), "Trains one worker.");
  EXPECT_NE(p.help.find("Usage: cumulus-train [FLAGS] CONFIG\n"), std::string::npos) << p.help;
  EXPECT_NE(p.help.find("  --set KEY=VALUE ..."), std::string::npos) << p.help;
  EXPECT_NE(p.help.find("  --resume DIR                resume from DIR\n"), std::string::npos)
      << p.help;
  EXPECT_NE(p.help.find("  --dry-run                   stop before training\n"), std::string::npos)
      << p.help;
  EXPECT_NE(p.help.find("Exit status: 0 success, 1 failure, 2 usage or configuration error"),
            std::string::npos)
      << p.help;
}

TEST(CliTest, MistakesAreNamed) {
  const std::string help = " (see cumulus-train --help)";
  EXPECT_EQ(errorOf({"x.yaml", "--prnt-config"}),
            "unknown flag --prnt-config; did you mean --print-config?" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--bogus"}), "unknown flag --bogus" + help);
  EXPECT_EQ(errorOf({"x.yaml", "-x"}), "unknown flag -x" + help);
  EXPECT_EQ(errorOf({}), "CONFIG is required" + help);
  EXPECT_EQ(errorOf({"a.yaml", "b.yaml"}), "unexpected argument \"b.yaml\"" + help);
  EXPECT_EQ(errorOf({"x.yaml", "--set"}), "--set: 1 required KEY=VALUE missing");
  EXPECT_EQ(errorOf({"x.yaml", "--set", "optimizer.lr"}),
            "--set: expected KEY=VALUE, e.g. --set optimizer.lr=0.05, got \"optimizer.lr\"");
  EXPECT_EQ(errorOf({"x.yaml", "--resume"}), "--resume: 1 required DIR missing");
  EXPECT_EQ(errorOf({"x.yaml", "--resume="}), "--resume: the value is empty; give --resume DIR");
  EXPECT_EQ(errorOf({"x.yaml", "--dry-run=yes"}), "--dry-run takes no value");
  EXPECT_EQ(errorOf({"x.yaml", "--print-config=1"}), "--print-config takes no value");
  EXPECT_EQ(errorOf({"x.yaml", "--resume", "a", "--resume", "b"}),
            "--resume: At Most 1 required but received 2");
}

}  // namespace
}  // namespace cumulus::configs
