#include "base/user_error.h"

namespace cumulus {

int exitCodeFor(const std::exception& error) {
  return dynamic_cast<const UserError*>(&error) != nullptr ? kUserErrorExitCode : kFailureExitCode;
}

}  // namespace cumulus
