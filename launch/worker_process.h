#pragma once
// One supervised worker: a process whose stdout and stderr are captured through one pipe.
//
// The worker runs under a keeper process (worker_keeper.h), the launcher's child: when the
// launcher dies, even by SIGKILL, the keeper kills the worker and everything it started, and when
// the worker exits, the keeper exits with the worker's exact status. The worker leads its own
// process group, so signal() reaches whatever it started in that group.
// Not thread-safe: one supervising thread owns each WorkerProcess (start/poll/stop are called
// from the thread that spawned it, because PDEATHSIG follows the spawning *thread*).

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace cumulus::launch {

// A worker's exit code when its command cannot be executed (no such program, not executable).
constexpr int kExitCannotExecute = 127;

struct ExitStatus {
  bool exited = false;  // false: still running
  int exit_code = 0;    // when it exited normally
  int signal = 0;       // when a signal ended it (exit_code is then -1)
  bool ok() const { return exited && signal == 0 && exit_code == 0; }
  std::string describe() const;  // "exit code 3", "signal SIGKILL"
};

class WorkerProcess {
 public:
  // argv[0] is looked up in PATH. env: added to (and overriding) the launcher's environment.
  WorkerProcess(std::vector<std::string> argv,
                std::vector<std::pair<std::string, std::string>> env);
  ~WorkerProcess();  // SIGKILLs the group if still running
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Forks the keeper, which forks and execs the worker; returns once the worker's process group
  // exists. Throws std::runtime_error if fork/pipe fail. An exec failure (no such program) shows
  // as exit code 127 with a message on the captured output.
  void start();
  // The worker's pid (it leads its process group); -1 if the keeper could not fork it.
  pid_t pid() const { return pid_; }
  // Read end of the child's stdout+stderr pipe; -1 before start(). Owned by this object.
  int outputFd() const { return out_fd_; }
  void closeOutput();

  // Non-blocking: reaps the keeper if the worker has exited (the keeper exits as it did).
  const ExitStatus& poll();
  // Sends `sig` to the worker's process group.
  void signal(int sig);
  // Blocks until reaped, up to `seconds`; returns whether it exited.
  bool waitFor(double seconds);

 private:
  std::vector<std::string> argv_;
  std::vector<std::pair<std::string, std::string>> env_;
  pid_t keeper_ = -1;  // the child the launcher waits for
  pid_t pid_ = -1;     // the worker, the keeper's child
  int out_fd_ = -1;
  ExitStatus status_;
};

// "SIGKILL" for 9, …
std::string signalName(int sig);

}  // namespace cumulus::launch
