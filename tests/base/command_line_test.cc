// The command line every binary shares: number checks, the wording of mistakes, --help.
#include "base/command_line.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "cumulus/version.h"

namespace cumulus::base {
namespace {

struct Flags {
  int64_t count = 7;
  double seconds = 1.5;
  double rate = 1;
  bool quiet = false;
  std::string name;
};

// Parses `args` for a program with one flag of each kind; returns the error text, or "" when it
// parsed (then `flags` holds the values).
std::string parse(const std::vector<std::string>& args, Flags& flags, std::string* help = nullptr) {
  CLI::App app{"Does one thing.", "cumulus-x"};
  setUpCommandLine(app);
  app.add_option("--count", flags.count, "how many")->type_name("N")->transform(integerIn(1, 64));
  app.add_option("--seconds", flags.seconds, "how long")
      ->type_name("S")
      ->transform(numberIn(0, 86400, "seconds"));
  app.add_option("--rate", flags.rate, "how fast")
      ->type_name("G")
      ->transform(positiveNumber("rate in Gbit/s", 1000));
  app.add_option("--name", flags.name, "what")->type_name("NAME")->check(nonEmpty("name"));
  app.add_flag("--quiet", flags.quiet, "say less");
  std::ostringstream out;
  try {
    const bool finished = parseCommandLine(app, args, out);
    if (help != nullptr) *help = out.str();
    return finished ? "" : "(help)";
  } catch (const UsageError& e) {
    return e.what();
  }
}

std::string errorOf(const std::vector<std::string>& args) {
  Flags flags;
  return parse(args, flags);
}

TEST(CommandLineTest, ParsesEveryForm) {
  Flags flags;
  ASSERT_EQ(
      parse({"--count", "010", "--seconds=0.25", "--rate", "2.5e1", "--quiet", "--name=n"}, flags),
      "");
  EXPECT_EQ(flags.count, 10);  // decimal, never octal
  EXPECT_DOUBLE_EQ(flags.seconds, 0.25);
  EXPECT_DOUBLE_EQ(flags.rate, 25);
  EXPECT_TRUE(flags.quiet);
  EXPECT_EQ(flags.name, "n");
}

TEST(CommandLineTest, RejectsMalformedAndOutOfRangeNumbers) {
  const std::string count = "--count: expected an integer in [1, 64], got ";
  EXPECT_EQ(errorOf({"--count", "2x"}), count + "\"2x\"");
  EXPECT_EQ(errorOf({"--count", ""}), count + "\"\"");
  EXPECT_EQ(errorOf({"--count", "-1"}), count + "\"-1\"");
  EXPECT_EQ(errorOf({"--count", "1e99"}), count + "\"1e99\"");
  EXPECT_EQ(errorOf({"--count", "0x10"}), count + "\"0x10\"");
  EXPECT_EQ(errorOf({"--count", " 3"}), count + "\" 3\"");
  EXPECT_EQ(errorOf({"--count", "99999999999999999999"}), count + "\"99999999999999999999\"");
  EXPECT_EQ(errorOf({"--seconds", "1s"}), "--seconds: expected seconds in [0, 86400], got \"1s\"");
  EXPECT_EQ(errorOf({"--seconds", "nan"}),
            "--seconds: expected seconds in [0, 86400], got \"nan\"");
  EXPECT_EQ(errorOf({"--rate", "0"}), "--rate: expected a positive rate in Gbit/s, got \"0\"");
  EXPECT_EQ(errorOf({"--rate", "1e99"}),
            "--rate: expected a positive rate in Gbit/s up to 1000, got \"1e99\"");
  EXPECT_EQ(errorOf({"--name", ""}), "--name: expected a non-empty name");
}

TEST(CommandLineTest, MistakesNameTheFlagAndSayWhatToDo) {
  EXPECT_EQ(errorOf({"--count="}), "--count: the value is empty; give --count N");
  EXPECT_EQ(errorOf({"--count"}), "--count: 1 required N missing");
  EXPECT_EQ(errorOf({"--quiet=yes"}), "--quiet takes no value");
  EXPECT_EQ(errorOf({"--cuont", "3"}),
            "unknown flag --cuont; did you mean --count? (see cumulus-x --help)");
  EXPECT_EQ(errorOf({"--zzz"}), "unknown flag --zzz (see cumulus-x --help)");
  EXPECT_EQ(errorOf({"extra"}), "unexpected argument \"extra\" (see cumulus-x --help)");
  EXPECT_EQ(errorOf({"--count", "3", "--count", "4"}),
            "--count: At Most 1 required but received 2");
}

TEST(CommandLineTest, HelpIsTheSharedLayout) {
  Flags flags;
  std::string help;
  ASSERT_EQ(parse({"--count", "2x", "--help"}, flags, &help), "(help)");
  EXPECT_EQ(help,
            "Does one thing.\n"
            "Usage: cumulus-x [FLAGS]\n"
            "\n"
            "Flags:\n"
            "  -h,--help                   print this help and exit\n"
            "  --version                   print the version and exit\n"
            "  --count N                   how many\n"
            "  --seconds S                 how long\n"
            "  --rate G                    how fast\n"
            "  --name NAME                 what\n"
            "  --quiet                     say less\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage or configuration error (the message is on "
            "stderr)\n");
}

// Every binary answers --version with its name and the project's one version (CMakeLists.txt),
// and exits 0 like --help.
TEST(CommandLineTest, VersionIsTheNameAndTheProjectVersion) {
  Flags flags;
  std::string out;
  ASSERT_EQ(parse({"--version"}, flags, &out), "(help)");
  EXPECT_EQ(out, std::string("cumulus-x ") + CUMULUS_VERSION_STRING + "\n");
  EXPECT_EQ(std::string(cumulus::version()), CUMULUS_VERSION_STRING);
  EXPECT_TRUE(std::regex_match(out, std::regex("cumulus-x [0-9]+\\.[0-9]+\\.[0-9]+\n"))) << out;
}

TEST(CommandLineTest, LongDescriptionsWrapUnderTheirColumn) {
  CLI::App app{"Does one thing.", "cumulus-x"};
  setUpCommandLine(app);
  std::string path;
  app.add_option("--path", path,
                 "where the output goes; the directory must exist, and the file is replaced "
                 "atomically when the run ends")
      ->type_name("PATH");
  std::ostringstream help;
  ASSERT_FALSE(parseCommandLine(app, {"--help"}, help));
  EXPECT_NE(
      help.str().find("  --path PATH                 where the output goes; the directory must "
                      "exist, and the file is\n"
                      "                              replaced atomically when the run ends\n"),
      std::string::npos)
      << help.str();
}

TEST(CommandLineTest, ReportErrorPrintsOneLineAndMapsTheExitCode) {
  std::ostringstream err;
  EXPECT_EQ(reportError("cumulus-x", UsageError("--count: bad"), err), 2);
  EXPECT_EQ(reportError("cumulus-x", std::runtime_error("disk on fire"), err), 1);
  EXPECT_EQ(err.str(), "cumulus-x: error: --count: bad\ncumulus-x: error: disk on fire\n");
}

TEST(CommandLineTest, StrictConversionsForListsAndRanges) {
  EXPECT_EQ(parseInteger("12", "--sizes", 4, 100), 12);
  EXPECT_DOUBLE_EQ(parseNumber("0.5", "--x", 0, 1), 0.5);
  try {
    parseInteger("12k", "--sizes", 4, 100);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--sizes: expected an integer in [4, 100], got \"12k\"");
  }
  EXPECT_THROW(parseNumber("2", "--x", 0, 1), UsageError);
}

}  // namespace
}  // namespace cumulus::base
