#pragma once
// The one way a Cumulus binary reads its command line: CLI11 (one flag library for every
// binary), with what every binary shares: the --help layout, the wording of a mistake and the
// exit codes.
//
// Typical main():
//   int run(int argc, char** argv) {
//     CLI::App app{"Serves the funnel's parameter server.", "cumulus-ps"};
//     base::setUpCommandLine(app);
//     int world = 0;
//     app.add_option("--world-size", world, "workers that push each step")
//         ->type_name("N")->required()->transform(base::integerIn(1, 65536));
//     if (!base::parseCommandLine(app, argc, argv)) return 0;  // --help was printed
//     ...
//   }
//   int main(int argc, char** argv) {
//     try { return run(argc, argv); }
//     catch (const std::exception& e) { return base::reportError("cumulus-ps", e); }
//   }
//
// A mistake is a UsageError (a UserError: exit 2) whose text names the flag and what it accepts:
//   --world-size: expected an integer in [1, 65536], got "2x"
//   unknown flag --wrld-size; did you mean --world-size? (see cumulus-ps --help)
// Numbers are decimal, whole and in range: "2x", "", "-1" where positive is required and "1e99"
// for an integer are all rejected. `--flag=` (an empty value) is rejected for every flag, and
// `--switch=VALUE` for every switch.
//
// Thread-compatible: one App per thread.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cumulus/errors.h"

namespace cumulus::base {

// A mistake on the command line; the text names the flag or argument and says what to do.
class UsageError : public UserError {
 public:
  using UserError::UserError;
};

// The exit codes every binary shares, for the --help footer.
inline constexpr const char* kCommonExitCodes =
    "0 success, 1 failure, 2 usage or configuration error (the message is on stderr)";

// The shared layout: "-h, --help", one column width, and a footer with `notes` (if any) and
// "Exit status: " + `exit_codes`. Call it before adding options.
void setUpCommandLine(CLI::App& app, const std::string& exit_codes = kCommonExitCodes,
                      const std::string& notes = "");

// Parses `args` (without the program name) into the variables the options are bound to. Returns
// false after writing the help to `help_out` when -h/--help was given, or "NAME X.Y.Z" for
// --version (every binary has it; the version is set once, in CMakeLists.txt): the caller exits 0.
// Throws UsageError for any mistake ("missing COMMAND: a or b" for an app whose subcommands are
// required).
bool parseCommandLine(CLI::App& app, std::vector<std::string> args,
                      std::ostream& help_out = std::cout);
bool parseCommandLine(CLI::App& app, int argc, const char* const argv[],
                      std::ostream& help_out = std::cout);

// Transforms for Option::transform(). A rejected value throws UsageError naming the flag:
//   integerIn  decimal digits with an optional sign, in [min, max]
//              ("expected an integer in [1, 64], got \"2x\""); rewritten to its canonical form
//              (so CLI11 never reads "010" as octal)
//   numberIn   a decimal number in [min, max] ("expected seconds in [0, 86400], got \"-1\"");
//              `what` names the unit: "seconds", "a number", "Gbit/s"
//   positiveNumber  a decimal number > 0 and at most `max` ("expected positive seconds, got \"0\"")
//   nonEmpty   any text but "" ("expected a non-empty PATH")
CLI::Validator integerIn(int64_t min, int64_t max);
CLI::Validator numberIn(double min, double max, const std::string& what = "a number");
CLI::Validator positiveNumber(const std::string& what = "number", double max = 1e300);
CLI::Validator nonEmpty(const std::string& what);

// Strict conversions for values a program splits itself (a list, a range): nullopt-free, they
// throw UsageError("`flag`: expected an integer in [min, max], got \"text\"").
int64_t parseInteger(const std::string& text, const std::string& flag, int64_t min, int64_t max);
double parseNumber(const std::string& text, const std::string& flag, double min, double max,
                   const std::string& what = "a number");

// The one place a binary turns an exception into its exit: prints "`program`: error: TEXT" on
// `err` and returns exitCodeFor(error) (2 for a UserError, 1 otherwise).
int reportError(const std::string& program, const std::exception& error,
                std::ostream& err = std::cerr);

}  // namespace cumulus::base
