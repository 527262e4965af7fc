#pragma once
// Helpers shared by the configs tests.

#include <string>
#include <vector>

#include "configs/parse.h"

namespace cumulus::configs::testing {

// The ConfigError message parseExperiment raises for `text`, or "(no error)".
inline std::string errorOf(const std::string& text, const std::vector<std::string>& overrides = {},
                           const std::string& source = "x.yaml") {
  try {
    parseExperiment(text, source, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// A minimal valid file.
inline const char* kMinimal = "name: t\n";

}  // namespace cumulus::configs::testing
