// The public option enums' names (<cumulus/options.h>), read from their tables there by the one
// mechanism every enum uses (base/enum_names.h). Lives in the lowest library so that the comm
// layer, configs, the launcher and the public API all share it.
#include "cumulus/options.h"

#include "base/enum_names.h"

namespace cumulus {

const char* algorithmName(Algorithm algorithm) { return base::nameOf(algorithm); }
const char* compressionName(Compression compression) { return base::nameOf(compression); }
const char* precisionName(Precision precision) { return base::nameOf(precision); }
const char* recoveryName(Recovery recovery) { return base::nameOf(recovery); }

Algorithm parseAlgorithm(std::string_view name) {
  return base::parseNamed<Algorithm>(name, "algorithm");
}
Compression parseCompression(std::string_view name) {
  return base::parseNamed<Compression>(name, "compression");
}
Precision parsePrecision(std::string_view name) {
  return base::parseNamed<Precision>(name, "precision");
}
Recovery parseRecovery(std::string_view name) {
  return base::parseNamed<Recovery>(name, "recovery");
}

}  // namespace cumulus
