// cumulus-config: validate and inspect experiment files without LibTorch.
//
//   cumulus-config check FILE [--set KEY=VALUE]...   print the resolved experiment, or the error
//   cumulus-config digest FILE [--set KEY=VALUE]...  print the config digest (SHA-256)
//   cumulus-config diff FILE_A FILE_B                print the keys that differ, one per line
//   cumulus-config defaults                          print every key at its default
//   cumulus-config reference [--file FILE.md]        print the key table, or rewrite it in FILE.md
//                                                    (docs/configuration.md); --readme is the
//                                                    same flag under its older name
//
// Exit status: 0 success (diff: no difference), 1 diff found differences, 2 any error.
#include <fstream>
#include <iostream>
#include <sstream>

#include "configs/cli.h"
#include "configs/digest.h"
#include "configs/parse.h"
#include "configs/reference.h"
#include "configs/schema.h"

namespace cumulus::configs {
namespace {

constexpr int kError = 2;

const char* kUsage =
    "usage: cumulus-config COMMAND ...\n"
    "\n"
    "  check FILE [--set KEY=VALUE]...    validate; print the resolved experiment as YAML\n"
    "  digest FILE [--set KEY=VALUE]...   print the config digest (SHA-256 of the resolved YAML)\n"
    "  diff FILE_A FILE_B                 print each key that differs (exit 1 if any)\n"
    "  defaults                           print every key at its default\n"
    "  reference [--file FILE]            print the table of keys, or rewrite it between its\n"
    "                                     markers in the Markdown FILE (docs/configuration.md);\n"
    "                                     --readme FILE is the same flag under its older name\n"
    "\n"
    "Exit status: 0 ok, 1 diff found differences, 2 error (the message is on stderr).\n";

int check(const std::vector<std::string>& args, bool digest_only) {
  CliSpec spec{digest_only ? "cumulus-config digest" : "cumulus-config check",
               "Validates an experiment file.",
               "FILE",
               true,
               {}};
  CliArgs parsed = parseCommandLine(spec, args);
  if (parsed.help) {
    std::cout << usageText(spec);
    return 0;
  }
  Experiment experiment = loadExperiment(parsed.config_path, parsed.overrides);
  std::cout << (digest_only ? configDigest(experiment) + "\n" : toYaml(experiment));
  return 0;
}

int diff(const std::vector<std::string>& args) {
  if (args.size() != 2) throw CliError("cumulus-config diff: expected two files, FILE_A FILE_B");
  Experiment a = loadExperiment(args[0]);
  Experiment b = loadExperiment(args[1]);
  std::vector<std::string> lines = describeDiff(a, b);
  for (const std::string& line : lines) std::cout << line << "\n";
  return lines.empty() ? 0 : 1;
}

int reference(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cout << referenceMarkdown();
    return 0;
  }
  // --readme is the flag's first name, from when the table lived in README.md; it takes any
  // Markdown file, as --file does.
  if (args.size() != 2 || (args[0] != "--file" && args[0] != "--readme")) {
    throw CliError(
        "cumulus-config reference: expected nothing (print the table) or --file FILE (rewrite "
        "it in FILE, e.g. --file docs/configuration.md)");
  }
  const std::string& path = args[1];
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CliError("cumulus-config reference: cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  std::string updated = withReferenceSection(text.str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << updated;
  if (!out.flush()) throw CliError("cumulus-config reference: cannot write " + path);
  std::cout << "updated the configuration reference in " << path << "\n";
  return 0;
}

int run(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "-h" || argv[0] == "--help" || argv[0] == "help") {
    (argv.empty() ? std::cerr : std::cout) << kUsage;
    return argv.empty() ? kError : 0;
  }
  const std::string& command = argv[0];
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  if (command == "check") return check(args, false);
  if (command == "digest") return check(args, true);
  if (command == "diff") return diff(args);
  if (command == "reference") return reference(args);
  if (command == "defaults" && args.empty()) {
    std::cout << toYaml(schemaDefaults());
    return 0;
  }
  std::cerr << "cumulus-config: unknown command \"" << command << "\"\n\n" << kUsage;
  return kError;
}

}  // namespace
}  // namespace cumulus::configs

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return cumulus::configs::run(args);
  } catch (const cumulus::configs::ConfigError& e) {
    std::cerr << e.what() << "\n";
  } catch (const cumulus::configs::CliError& e) {
    std::cerr << e.what() << "\n";
  }
  return cumulus::configs::kError;
}
