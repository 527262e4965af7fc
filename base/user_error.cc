#include "base/user_error.h"

namespace cumulus::base {

int exitCodeFor(const std::exception& error) {
  return dynamic_cast<const UserError*>(&error) != nullptr ? kUserErrorExitCode : kFailureExitCode;
}

}  // namespace cumulus::base
