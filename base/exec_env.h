#pragma once
// The argument and environment arrays of an execve(), built before fork(). In the child of a
// multi-threaded process only async-signal-safe calls are safe until the exec: setenv(),
// std::string and every other allocation may block for ever on a lock that another thread of the
// parent held at the fork (glibc's malloc survives that; the sanitizers' allocators do not).
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cumulus::base {

class ExecArgs {
 public:
  using Change = std::pair<std::string, std::optional<std::string>>;  // nullopt: unset the name

  // argv as given; the environment is this process's, with each change applied in order.
  ExecArgs(std::vector<std::string> argv, const std::vector<Change>& changes = {});

  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  char** argv() { return argv_pointers_.data(); }
  char** envp() { return env_pointers_.data(); }
  const char* program() const { return argv_.empty() ? "" : argv_.front().c_str(); }

 private:
  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  std::vector<char*> argv_pointers_;
  std::vector<char*> env_pointers_;
};

}  // namespace cumulus::base
