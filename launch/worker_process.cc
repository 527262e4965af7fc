#include "launch/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "base/fd.h"

extern char** environ;

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
  if (pid_ > 0) {
    signal(SIGKILL);
    waitFor(5.0);
  }
  closeOutput();
}

void WorkerProcess::closeOutput() {
  if (out_fd_ >= 0) ::close(out_fd_);
  out_fd_ = -1;
}

void WorkerProcess::start() {
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    std::string key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : env_) overridden |= (kv.first == key);
    if (!overridden) env_strings.push_back(entry);
  }
  for (const auto& kv : env_) env_strings.push_back(kv.first + "=" + kv.second);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argvp;
  for (auto& s : argv_) argvp.push_back(s.data());
  argvp.push_back(nullptr);
  std::string exec_error = "cumulus-run: cannot execute " + argv_[0] + ": ";

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  pid_t parent = ::getpid();
  // SIGUSR1 blocked across fork(), so that a request sent to the new group before the child
  // reaches its own sigprocmask cannot kill it (the child keeps it blocked, see below).
  sigset_t usr1, before_fork;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, &before_fork);
  pid_t pid = ::fork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &before_fork, nullptr);
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error("fork: " + std::string(strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(1);  // the launcher died before prctl took effect
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    // Default dispositions: the launcher may block or ignore signals the worker must see.
    // SIGUSR1 ("checkpoint now", a rebalance recommendation) stays blocked: its default action
    // kills, so only a worker that installs a handler and unblocks it (cumulus-train) sees it.
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    ::execvpe(argvp[0], argvp.data(), envp.data());
    int err = errno;
    ssize_t ignored = ::write(STDERR_FILENO, exec_error.data(), exec_error.size());
    const char* msg = strerror(err);
    ignored = ::write(STDERR_FILENO, msg, strlen(msg));
    ignored = ::write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    _exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so signal() can't race the child's setpgid
  ::close(fds[1]);
  pid_ = pid;
  out_fd_ = fds[0];
  status_ = ExitStatus{};
}

const ExitStatus& WorkerProcess::poll() {
  if (pid_ <= 0 || status_.exited) return status_;
  int wstatus = 0;
  pid_t r = ::waitpid(pid_, &wstatus, WNOHANG);
  if (r == pid_) {
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
  if (pid_ > 0) {
    // A pidfd becomes readable when the child exits: sleep until then (or the deadline) instead
    // of waking every few milliseconds to ask. The child is ours and not reaped yet, so its pid
    // cannot have been reused. Without pidfds (ENOSYS, a kernel before 5.3) the loop below asks.
    // (Through syscall(): Debian's glibc 2.36 declares pidfd_open without C linkage for C++.)
    const base::Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));
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
