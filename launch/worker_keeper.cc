#include "launch/worker_keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch/worker_process.h"

namespace cumulus::launch {
namespace {

void say(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, strlen(text));
  (void)ignored;
}

// "/proc/self/task/<pid>/children" into `out` (the keeper has one thread: its tid is its pid).
void childrenPath(char* out, size_t size) {
  const char prefix[] = "/proc/self/task/";
  const char suffix[] = "/children";
  char digits[16];
  int n = 0;
  for (pid_t pid = ::getpid(); pid > 0 && n < 16; pid /= 10) digits[n++] = char('0' + pid % 10);
  size_t at = 0;
  for (const char* p = prefix; *p && at + 1 < size; ++p) out[at++] = *p;
  while (n > 0 && at + 1 < size) out[at++] = digits[--n];
  for (const char* p = suffix; *p && at + 1 < size; ++p) out[at++] = *p;
  out[at] = '\0';
}

// SIGKILLs every child of the keeper: the worker's descendants reparented to it, whatever
// process group they moved to. Returns false when the list cannot be read (a kernel without
// CONFIG_PROC_CHILDREN).
bool killChildren() {
  char path[64];
  childrenPath(path, sizeof path);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  pid_t pid = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    for (ssize_t i = 0; i < got; ++i) {  // "12 345 " (a number may span two reads)
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
      } else if (pid > 0) {
        ::kill(pid, SIGKILL);
        pid = 0;
      }
    }
  }
  if (pid > 0) ::kill(pid, SIGKILL);
  ::close(fd);
  return true;
}

// Kills and reaps everything left under the keeper. A child that cannot be listed is not waited
// for: the keeper must exit promptly with the worker's status.
void reapTheRest() {
  for (;;) {
    const bool listed = killChildren();
    int status = 0;
    const pid_t r = ::waitpid(-1, &status, listed ? 0 : WNOHANG);
    if (r > 0 || (r < 0 && errno == EINTR)) continue;
    return;  // ECHILD: nothing left; 0: only unlisted children, left to init
  }
}

// Exits as the worker did: its exit code, or death by its signal (no core dump of the keeper).
[[noreturn]] void exitLike(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::kill(::getpid(), sig);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

// The worker, in the keeper's child: its own process group, dead with the keeper, default signal
// dispositions, then exec.
[[noreturn]] void execWorker(const KeeperArgs& a, pid_t keeper) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != keeper) _exit(1);  // the keeper died before prctl took effect
  // SIGUSR1 ("checkpoint now", a rebalance recommendation) stays blocked: its default action
  // kills, so only a worker that installs a handler and unblocks it (cumulus-train) sees it.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR1);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  // The launcher may block or ignore signals the worker must see.
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);
  ::execvpe(a.argv[0], a.argv, a.envp);
  const int err = errno;
  say(a.exec_error);
  const char* why = strerrordesc_np(err);  // untranslated, no allocation
  say(why ? why : "unknown error");
  say("\n");
  _exit(kExitCannotExecute);
}

}  // namespace

void runKeeper(const KeeperArgs& a) {
  ::setpgid(0, 0);  // alone: signals to the launcher's group do not reach the keeper
  ::prctl(PR_SET_NAME,
          "cumulus-keeper");  // what ps and top call it (its cmdline is the launcher's)
  // No signal handlers: the launcher's death and the children's exits are taken synchronously
  // (sigwaitinfo below), which needs them blocked from before they can arrive. A handler would
  // also never run in a sanitizer build: its runtime defers handlers in a process forked from a
  // multithreaded one, and the launcher's death would go unnoticed.
  sigset_t awaited;
  sigemptyset(&awaited);
  sigaddset(&awaited, kKeeperDeathSignal);
  sigaddset(&awaited, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &awaited, nullptr);
  ::signal(SIGCHLD, SIG_DFL);  // a blocked SIGCHLD stays pending only if it is not ignored
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::prctl(PR_SET_PDEATHSIG, kKeeperDeathSignal);
  if (::getppid() != a.launcher) _exit(1);  // the launcher died before prctl took effect
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(a.output_fd, STDOUT_FILENO);
  ::dup2(a.output_fd, STDERR_FILENO);
  if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);

  const pid_t keeper = ::getpid();
  const pid_t worker = ::fork();
  if (worker == 0) execWorker(a, keeper);
  if (worker < 0) {
    say("cumulus-run: cannot start the worker: fork failed\n");
    _exit(1);
  }
  ::setpgid(worker, worker);  // also here, so the launcher never signals a group not yet there
  // A signal meant for the launcher's group or terminal is not the keeper's business; SIGPIPE
  // either, should the launcher be gone before the write below.
  const int ignored_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
  for (int sig : ignored_signals) ::signal(sig, SIG_IGN);
  ssize_t ignored = ::write(a.pid_fd, &worker, sizeof worker);
  (void)ignored;
  // Let go of the worker's output (its end of file comes when the worker's tree closes it) and
  // of every descriptor inherited from the launcher.
  if (devnull >= 0) {
    ::dup2(devnull, STDOUT_FILENO);
    ::dup2(devnull, STDERR_FILENO);
  }
  ::syscall(SYS_close_range, 3U, ~0U, 0U);

  // Reap whatever exited (the worker, or descendants reparented here), then wait for the next
  // child's exit or the launcher's death. A child that exits between the two leaves its SIGCHLD
  // pending, so the wait returns at once.
  int status = 0;
  bool launcher_gone = false;
  for (bool worker_done = false; !worker_done;) {
    for (;;) {
      int any = 0;
      const pid_t r = ::waitpid(-1, &any, WNOHANG);
      if (r == worker) {
        status = any;
        worker_done = true;
      }
      if (r == 0 || (r < 0 && errno != EINTR)) break;
    }
    if (worker_done) break;
    siginfo_t info;
    if (::sigwaitinfo(&awaited, &info) == kKeeperDeathSignal) {
      launcher_gone = true;
      ::kill(-worker, SIGKILL);  // its death ends the wait; the rest is swept below
    }
  }
  ::kill(-worker, SIGKILL);  // what the worker left in its group
  reapTheRest();
  if (launcher_gone) _exit(1);  // no one is waiting for the status
  exitLike(status);
}

}  // namespace cumulus::launch
