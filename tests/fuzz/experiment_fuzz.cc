// The experiment parser (configs/parse.h) on untrusted text: the bytes up to the first NUL are
// the YAML file, each NUL-separated piece after it one --set override. A ConfigError is the
// expected answer to bad input; anything else is a finding, and so is an accepted experiment
// that does not survive its own round trip, parseExperiment(toYaml(e)) == e (parse.h).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "configs/parse.h"
#include "tests/fuzz/fuzz_check.h"

using cumulus::configs::ConfigError;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string::npos && at < input.size();) {
    const size_t next = input.find('\0', at + 1);
    overrides.push_back(input.substr(at + 1, next == std::string::npos ? next : next - at - 1));
    at = next;
  }
  cumulus::configs::Experiment experiment;
  try {
    experiment = cumulus::configs::parseExperiment(yaml, "fuzz.yaml", overrides);
  } catch (const ConfigError&) {
    return 0;
  }
  const std::string emitted = cumulus::configs::toYaml(experiment);
  try {
    cumulus::fuzz::check(cumulus::configs::parseExperiment(emitted, "emitted.yaml") == experiment,
                         "toYaml round trip changed the experiment:\n" + emitted);
  } catch (const ConfigError& e) {
    cumulus::fuzz::finding(std::string("toYaml wrote what the parser refuses: ") + e.what() + "\n" +
                           emitted);
  }
  return 0;
}
