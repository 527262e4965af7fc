#pragma once
// Test helper: runs a command with stdout and stderr on one pipe, hands each line to a callback
// (which may signal the process), and enforces a timeout. No LibTorch.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/exec_env.h"

namespace cumulus::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 if a signal ended it
  int signal = 0;
  bool timed_out = false;
  std::string output;
};

// `env` entries are set in the child (an empty value unsets the variable). on_line(line, pid)
// for each line; on_start(pid) once the child exists.
inline ProcessResult runProcess(const std::vector<std::string>& argv,
                                const std::vector<std::pair<std::string, std::string>>& env = {},
                                const std::function<void(const std::string&, pid_t)>& on_line = {},
                                double timeout_s = 120,
                                const std::function<void(pid_t)>& on_start = {}) {
  // Built before fork(): the test process runs threads (gRPC), so the child may not allocate.
  std::vector<base::ExecArgs::Change> changes;
  for (const auto& [key, value] : env) {
    changes.emplace_back(key, value.empty() ? std::nullopt : std::optional<std::string>(value));
  }
  base::ExecArgs exec(argv, changes);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::execvpe(exec.program(), exec.argv(), exec.envp());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (on_start) on_start(pid);
  ProcessResult result;
  const auto start = std::chrono::steady_clock::now();
  std::string pending;
  bool open = true;
  while (open) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char chunk[4096];
      const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
      if (n <= 0) {
        open = false;
      } else {
        pending.append(chunk, static_cast<size_t>(n));
        for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
          const std::string line = pending.substr(0, nl);
          pending.erase(0, nl + 1);
          result.output += line + "\n";
          if (on_line) on_line(line, pid);
        }
      }
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
        timeout_s) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
  }
  result.output += pending;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  ::kill(-pid, SIGKILL);  // whatever it left in its group
  return result;
}

// The text after `marker` up to the end of its line, from the last line that has it; "" if none.
inline std::string lastAfter(const std::string& output, const std::string& marker) {
  const size_t at = output.rfind(marker);
  if (at == std::string::npos) return "";
  const size_t begin = at + marker.size();
  return output.substr(begin, output.find('\n', begin) - begin);
}

}  // namespace cumulus::testing
