#include "launch/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "base/exec_env.h"
#include "base/fd.h"
#include "launch/worker_keeper.h"

namespace cumulus::launch {

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string ExitStatus::describe() const {
  if (!exited) return "running";
  if (signal != 0) return "signal " + signalName(signal);
  return "exit code " + std::to_string(exit_code);
}

WorkerProcess::WorkerProcess(std::vector<std::string> argv,
                             std::vector<std::pair<std::string, std::string>> env)
    : argv_(std::move(argv)), env_(std::move(env)) {}

WorkerProcess::~WorkerProcess() {
  if (keeper_ > 0) {
    signal(SIGKILL);
    // The keeper exits once the worker's tree is gone; killed itself, it still takes the worker.
    if (!waitFor(5.0)) ::kill(keeper_, SIGKILL);
  }
  closeOutput();
}

void WorkerProcess::closeOutput() {
  if (out_fd_ >= 0) ::close(out_fd_);
  out_fd_ = -1;
}

void WorkerProcess::start() {
  // Everything the keeper and the worker need is built before fork(): after it, only
  // async-signal-safe calls (worker_keeper.h).
  std::vector<base::ExecArgs::Change> changes;
  for (const auto& [name, value] : env_) changes.emplace_back(name, value);
  base::ExecArgs exec(argv_, changes);
  const std::string exec_error = "cumulus-run: cannot execute " + argv_[0] + ": ";

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  int pid_pipe[2];
  if (::pipe2(pid_pipe, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  }
  KeeperArgs args;
  args.launcher = ::getpid();
  args.output_fd = out[1];
  args.pid_fd = pid_pipe[1];
  args.argv = exec.argv();
  args.envp = exec.envp();
  args.exec_error = exec_error.c_str();
  // SIGUSR1 blocked across fork(), so that a request sent to the new group before the worker
  // reaches its own sigprocmask cannot kill it (the worker keeps it blocked, see the keeper).
  sigset_t usr1, before_fork;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, &before_fork);
  const pid_t keeper = ::fork();
  if (keeper == 0) runKeeper(args);
  pthread_sigmask(SIG_SETMASK, &before_fork, nullptr);
  ::close(out[1]);
  ::close(pid_pipe[1]);
  if (keeper < 0) {
    ::close(out[0]);
    ::close(pid_pipe[0]);
    throw std::runtime_error("fork: " + std::string(strerror(errno)));
  }
  ::setpgid(keeper, keeper);
  keeper_ = keeper;
  // The keeper writes the worker's pid as soon as the worker's process group exists; end of file
  // means the keeper could not fork it (its exit status says so).
  pid_t worker = -1;
  ssize_t got;
  do {
    got = ::read(pid_pipe[0], &worker, sizeof worker);
  } while (got < 0 && errno == EINTR);
  ::close(pid_pipe[0]);
  pid_ = got == static_cast<ssize_t>(sizeof worker) ? worker : -1;
  out_fd_ = out[0];
  status_ = ExitStatus{};
}

const ExitStatus& WorkerProcess::poll() {
  if (keeper_ <= 0 || status_.exited) return status_;
  int wstatus = 0;
  pid_t r = ::waitpid(keeper_, &wstatus, WNOHANG);
  if (r == keeper_) {
    status_.exited = true;
    if (WIFSIGNALED(wstatus)) {
      status_.signal = WTERMSIG(wstatus);
      status_.exit_code = -1;
    } else {
      status_.exit_code = WEXITSTATUS(wstatus);
    }
  }
  return status_;
}

void WorkerProcess::signal(int sig) {
  // The group outlives its leader when the worker started children of its own: signal the group
  // even after the leader has been reaped (ESRCH once the group is empty is harmless).
  if (pid_ > 0) ::kill(-pid_, sig);
}

bool WorkerProcess::waitFor(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  if (poll().exited) return true;
  if (keeper_ > 0) {
    // A pidfd becomes readable when the child exits: sleep until then (or the deadline) instead
    // of waking every few milliseconds to ask. The child is ours and not reaped yet, so its pid
    // cannot have been reused. Without pidfds (ENOSYS, a kernel before 5.3) the loop below asks.
    // (Through syscall(): Debian's glibc 2.36 declares pidfd_open without C linkage for C++.)
    const base::Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, keeper_, 0)));
    while (pidfd.valid()) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd fd{pidfd.get(), POLLIN, 0};
      const int ready = ::poll(&fd, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
      if (ready == 0) return poll().exited;  // the deadline passed
      if (ready < 0 && errno == EINTR) continue;
      break;  // it exited (reaped just below), or poll failed and asking still works
    }
  }
  while (!poll().exited) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace cumulus::launch
