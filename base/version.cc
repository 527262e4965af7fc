#include "cumulus/version.h"

namespace cumulus {

const char* version() { return CUMULUS_VERSION_STRING; }

}  // namespace cumulus
