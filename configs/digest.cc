#include "configs/digest.h"

#include "base/hash.h"
#include "configs/parse.h"
#include "configs/schema.h"

namespace cumulus::configs {

std::string configDigest(const Experiment& experiment) {
  return base::sha256Hex(toYaml(experiment));
}

std::vector<std::string> diffKeys(const Experiment& a, const Experiment& b) {
  std::vector<std::string> keys;
  for (const KeySpec& key : schema()) {
    if (key.get(a) != key.get(b)) keys.emplace_back(key.path);
  }
  return keys;
}

std::vector<std::string> describeDiff(const Experiment& before, const Experiment& after) {
  std::vector<std::string> lines;
  for (const KeySpec& key : schema()) {
    Value old_value = key.get(before), new_value = key.get(after);
    if (old_value != new_value) {
      lines.push_back(std::string(key.path) + ": " + formatValue(old_value) + " -> " +
                      formatValue(new_value));
    }
  }
  return lines;
}

}  // namespace cumulus::configs
