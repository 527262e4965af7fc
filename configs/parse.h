#pragma once
// Parsing, validation and overrides for experiment YAML files.
//
// Every error is a ConfigError whose message names the source and the key path, with line:column
// where the YAML has one, and says what to do, e.g.
//   configs/x.yaml:12:5: optimizer.lr: expected a number > 0, got "fast"
//   configs/x.yaml:3:3: trainer.lr: unknown key; did you mean `optimizer.lr`?
//   --set optimizer.lr=abc: optimizer.lr: expected a number > 0, got "abc"
// Parsing never trains, never writes, and fails fast with bounded memory on hostile input.
//
// The rules (every key, its type, default and allowed values: configs/schema.cc, or
// `cumulus-config reference`):
// - The file is one YAML document whose top level is a mapping. `name` is the only required key
//   (it names the run); every other key has a default, and a section may be absent or empty.
// - A key may be nested (`optimizer: {lr: 0.1}`) or dotted at the top level (`optimizer.lr: 0.1`),
//   but set only once per file. Unknown keys are errors, with a suggestion.
// - Values are typed strictly: a quoted "0.1" is not a number, `yes` is not a bool; integers
//   may be written 1e4. Numbers must be finite and within the key's range; strings with choices
//   must be one of them.
// - Overrides ("key=value" or "section={k: v, ...}", the value read as YAML; an empty value is the
//   empty string for string keys) apply after the file, in order. Each file value and each
//   override is checked as it is applied; the checks that relate keys (global_batch_size
//   divisible by grad_accumulation, first_bucket_mb <= bucket_cap_mb, cosine min_lr <= lr,
//   synthetic samples >= one global batch, data.train and data.test named when data.format is npy
//   or tokens) run once at the end, so a later override may repair an earlier value, and blame
//   the key set last.
// - Hostile input is bounded (configs/yaml_reader.h): at most 1 MiB, 64 levels of nesting and
//   10,000 YAML nodes; anchors, aliases, tags and second documents are rejected.
//
// All functions are reentrant and thread-safe.

#include <stdexcept>
#include <string>
#include <vector>

#include "cumulus/errors.h"
#include "configs/experiment.h"

namespace cumulus::configs {

class ConfigError : public cumulus::UserError {
 public:
  using cumulus::UserError::UserError;
};

// Reads `path`, applies `overrides` ("dotted.key=value", as given to --set) on top, validates.
Experiment loadExperiment(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from text; `source` names it in errors.
Experiment parseExperiment(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides = {});

// The resolved experiment as YAML, every key present: what --print-config prints and what each
// run directory keeps as config.yaml. parseExperiment(toYaml(e)) == e.
std::string toYaml(const Experiment& experiment);

// The reference table of every key (path, type, default, meaning) as Markdown, for docs/configuration.md.
std::string referenceMarkdown();

}  // namespace cumulus::configs
