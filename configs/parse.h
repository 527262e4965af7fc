#pragma once
// Parsing, validation and overrides for experiment YAML files.
//
// Every error is a ConfigError whose message names the source and the key path, with line:column
// where the YAML has one, e.g.
//   configs/x.yaml:12:5: optimizer.lr: expected a number > 0, got "fast"
// Parsing never trains, never writes, and fails fast with bounded memory on hostile input.

#include <stdexcept>
#include <string>
#include <vector>

#include "configs/experiment.h"

namespace cumulus::configs {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads `path`, applies `overrides` ("dotted.key=value", as given to --set) on top, validates.
Experiment loadExperiment(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from text; `source` names it in errors.
Experiment parseExperiment(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides = {});

// The resolved experiment as YAML, every key present: what --print-config prints and what each
// run directory keeps as config.yaml. parseExperiment(toYaml(e)) == e.
std::string toYaml(const Experiment& experiment);

// The reference table of every key (path, type, default, meaning) as Markdown, for the README.
std::string referenceMarkdown();

}  // namespace cumulus::configs
