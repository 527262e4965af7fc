#include "cumulus/errors.h"

#include <cerrno>

namespace cumulus {

int exitCodeFor(const std::exception& error) {
  const bool permanent = dynamic_cast<const UserError*>(&error) != nullptr ||
                         dynamic_cast<const PermanentError*>(&error) != nullptr;
  return permanent ? kUserErrorExitCode : kFailureExitCode;
}

bool isPermanentFileError(int error_number) {
  switch (error_number) {
    case ENOSPC:
    case EDQUOT:
    case EROFS:
    case EACCES:
    case EPERM:
      return true;
    default:
      return false;
  }
}

}  // namespace cumulus
