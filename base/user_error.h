#pragma once
// UserError: the base of every error that the user must fix (a bad flag, config, file or
// environment variable) rather than one the program should be blamed for. Its text names the
// thing and says what to do. exitCodeFor() is the one place that maps it to an exit status.

#include <exception>
#include <stdexcept>

namespace cumulus::base {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The exit status of a program that ends because of a UserError: the user must change something
// before trying again (like a usage error of a shell tool).
inline constexpr int kUserErrorExitCode = 2;
// The exit status of a program that ends because of any other exception.
inline constexpr int kFailureExitCode = 1;

// kUserErrorExitCode for a UserError (or anything derived from it), kFailureExitCode otherwise.
// Pure; thread-safe.
int exitCodeFor(const std::exception& error);

}  // namespace cumulus::base
