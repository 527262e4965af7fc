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
#include <optional>

#include "base/regular_file.h"
#include "configs/cli.h"
#include "configs/digest.h"
#include "configs/parse.h"
#include "configs/reference.h"
#include "configs/schema.h"

namespace cumulus::configs {
namespace {

constexpr const char* kProgram = "cumulus-config";

int reference(const std::string& path) {
  if (path.empty()) {
    std::cout << referenceMarkdown();
    return 0;
  }
  std::string problem;
  const std::optional<std::string> text = base::readRegularFile(path, problem);
  if (!text) throw base::UsageError(path + ": " + problem);
  std::string updated = withReferenceSection(*text);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << updated;
  if (!out.flush()) throw base::UsageError("cannot write " + path);
  std::cout << "updated the configuration reference in " << path << "\n";
  return 0;
}

int diff(const std::string& a_path, const std::string& b_path) {
  std::vector<std::string> lines = describeDiff(loadExperiment(a_path), loadExperiment(b_path));
  for (const std::string& line : lines) std::cout << line << "\n";
  return lines.empty() ? 0 : 1;
}

int run(int argc, char** argv) {
  CLI::App app{"Validates and inspects experiment files.", kProgram};
  base::setUpCommandLine(app, "0 ok, 1 diff found differences, 2 error (the message is on stderr)",
                         "Every key, its default and meaning: cumulus-config reference");
  app.require_subcommand(1);
  ExperimentArgs checked;
  CLI::App* check = app.add_subcommand("check", "validate; print the resolved experiment as YAML");
  addExperimentArgs(*check, checked, "FILE", /*with_print_config=*/false);
  ExperimentArgs digested;
  CLI::App* digest =
      app.add_subcommand("digest", "print the config digest (SHA-256 of the resolved YAML)");
  addExperimentArgs(*digest, digested, "FILE", /*with_print_config=*/false);
  std::string file_a, file_b;
  CLI::App* diff_command =
      app.add_subcommand("diff", "print each key that differs (exit 1 if any)");
  diff_command->add_option("FILE_A", file_a, "an experiment file")->required()->type_name("");
  diff_command->add_option("FILE_B", file_b, "the other one")->required()->type_name("");
  CLI::App* defaults = app.add_subcommand("defaults", "print every key at its default");
  std::string markdown;
  CLI::App* reference_command =
      app.add_subcommand("reference", "print the table of keys, or rewrite it in a Markdown file");
  // --readme is the flag's first name, from when the table lived in README.md.
  reference_command
      ->add_option("--file,--readme", markdown,
                   "rewrite the table between its markers in FILE (docs/configuration.md)")
      ->type_name("FILE");
  for (CLI::App* sub : {check, digest, diff_command, defaults, reference_command}) {
    base::setUpCommandLine(*sub, "0 ok, 1 diff found differences, 2 error");
  }
  if (!base::parseCommandLine(app, argc, argv)) return 0;

  if (check->parsed()) {
    std::cout << toYaml(loadExperiment(checked.config_path, checked.overrides));
  } else if (digest->parsed()) {
    std::cout << configDigest(loadExperiment(digested.config_path, digested.overrides)) << "\n";
  } else if (diff_command->parsed()) {
    return diff(file_a, file_b);
  } else if (defaults->parsed()) {
    std::cout << toYaml(schemaDefaults());
  } else {
    return reference(markdown);
  }
  return 0;
}

}  // namespace
}  // namespace cumulus::configs

int main(int argc, char** argv) {
  try {
    return cumulus::configs::run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError(cumulus::configs::kProgram, e);
  }
}
