#pragma once
// UserError: the base of every error that the user must fix (a bad flag, config, file or
// environment variable) rather than one the program should be blamed for. Its text names the
// thing and says what to do. exitCodeFor() is the one place that maps it to an exit status.
// The type and the exit codes are public API (<cumulus/errors.h>); these are base's names for them.

#include "cumulus/errors.h"

namespace cumulus::base {

using cumulus::exitCodeFor;
using cumulus::isPermanentFileError;
using cumulus::kFailureExitCode;
using cumulus::kUserErrorExitCode;
using cumulus::PermanentError;
using cumulus::UserError;

}  // namespace cumulus::base
