#pragma once
// Fingerprints and differences of experiments, for checkpoint resume: a checkpoint records
// configDigest(experiment); on resume, a different digest means the config changed, and
// diffKeys/describeDiff say which keys.

#include <string>
#include <vector>

#include "configs/experiment.h"

namespace cumulus::configs {

// SHA-256 (lower-case hex, 64 characters) of toYaml(experiment). toYaml writes every key in the
// schema's fixed order with canonical number formatting, so two experiments have the same digest
// exactly when they are equal, however their files were written. Adding a key to the schema
// changes every digest (the new key appears in toYaml), which is intended: the config did change.
std::string configDigest(const Experiment& experiment);

// The dotted paths of the keys whose values differ, in schema order. Empty when a == b.
std::vector<std::string> diffKeys(const Experiment& a, const Experiment& b);

// One line per differing key, "optimizer.lr: 0.1 -> 0.05", values in YAML form.
std::vector<std::string> describeDiff(const Experiment& before, const Experiment& after);

}  // namespace cumulus::configs
