#pragma once
// The command line shared by every Cumulus binary that takes an experiment:
//
//   PROGRAM CONFIG [--set KEY=VALUE]... [--print-config] [--help] [--FLAG[=VALUE]]...
//
// `--set` may repeat; each KEY=VALUE is kept, in order, for loadExperiment(path, overrides).
// Flags other than --set, --print-config and --help are declared by the program in a CliSpec;
// a value flag takes its value as `--flag VALUE` or `--flag=VALUE`, a switch takes none. `--`
// ends the flags. Flags and the positional may come in any order.
//
// Typical main():
//   CliSpec spec{"cumulus-train", "Trains one worker of an experiment.", "CONFIG", true,
//                {{"resume", "DIR", "resume from the newest checkpoint in DIR"}}};
//   CliArgs args;
//   try { args = parseCommandLine(spec, argc, argv); }
//   catch (const CliError& e) { std::cerr << e.what() << "\n"; return 64; }  // EX_USAGE
//   if (args.help) { std::cout << usageText(spec); return 0; }
//   Experiment experiment = loadExperiment(args.config_path, args.overrides);  // ConfigError
//   if (args.print_config) { std::cout << toYaml(experiment); return 0; }
//
// Pure functions of their arguments; thread-safe.

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"

namespace cumulus::configs {

// A usage mistake; the message starts with the program name and says what to do.
class CliError : public base::UserError {
 public:
  using base::UserError::UserError;
};

struct FlagSpec {
  std::string name;        // without the dashes: "resume"
  std::string value_name;  // "DIR" for a flag with a value; empty for a switch
  std::string help;        // one line
};

struct CliSpec {
  std::string program;                // "cumulus-train", for messages and usage
  std::string summary;                // one line for --help
  std::string positional = "CONFIG";  // name of the one positional argument; "" takes none
  bool positional_required = true;
  std::vector<FlagSpec> flags;  // besides --set, --print-config and --help
};

struct CliArgs {
  std::string config_path;             // the positional, "" if absent
  std::vector<std::string> overrides;  // "KEY=VALUE" of each --set, in order
  bool print_config = false;
  bool help = false;                         // --help or -h; nothing else is checked then
  std::map<std::string, std::string> flags;  // declared flags given: name -> value ("" switch)

  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  std::string value(const std::string& flag, const std::string& fallback = "") const {
    auto it = flags.find(flag);
    return it == flags.end() ? fallback : it->second;
  }
};

// Parses `args` (without the program name). Throws CliError for an unknown flag (suggesting the
// closest one), a missing or extra positional, a missing value, a value given to a switch, a flag
// given twice, or a --set without '='.
CliArgs parseCommandLine(const CliSpec& spec, const std::vector<std::string>& args);
CliArgs parseCommandLine(const CliSpec& spec, int argc, const char* const argv[]);

// The --help text: usage line, summary, and one line per flag.
std::string usageText(const CliSpec& spec);

}  // namespace cumulus::configs
