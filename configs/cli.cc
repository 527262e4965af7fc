#include "configs/cli.h"

namespace cumulus::configs {

void addExperimentArgs(CLI::App& app, ExperimentArgs& args, const std::string& positional,
                       bool with_print_config) {
  app.add_option(positional, args.config_path, "the experiment file (YAML)")
      ->required()
      ->type_name("");
  app.add_option("--set", args.overrides,
                 "override one experiment key (repeatable), e.g. --set optimizer.lr=0.05")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text.find('=') != std::string::npos && text.front() != '=') return "";
            return "expected KEY=VALUE, e.g. --set optimizer.lr=0.05, got \"" + text + "\"";
          },
          ""));
  if (with_print_config) {
    app.add_flag("--print-config", args.print_config,
                 "print the resolved experiment as YAML and exit");
  }
}

}  // namespace cumulus::configs
