#pragma once
// The keeper: a small process between the launcher and one worker, so that no process of the
// worker's tree outlives the launcher, even when the launcher dies of SIGKILL.
//
// PR_SET_PDEATHSIG alone reaches only the process it is set on: a worker's own children (a data
// loader, `sleep 600 &` in a worker script) would be orphaned. The keeper is the launcher's child,
// alone in its own process group, with PR_SET_PDEATHSIG(kKeeperDeathSignal) and
// PR_SET_CHILD_SUBREAPER: the worker's descendants whose parents die become its children, not
// init's. It forks the worker into a process group of the worker's own (led by the worker, as
// before the keeper existed, so the launcher signals that group directly) and then:
//   - when the launcher dies: SIGKILLs the worker's group and every process reparented to it,
//     until it has no children left, and exits;
//   - when the worker exits: SIGKILLs what is left of the worker's group and of its reparented
//     descendants (nothing of a finished worker runs on), then exits with the worker's exact
//     status: the same exit code, or death by the same signal (re-raised, without a core dump).
// So the launcher waits on the keeper and signals the worker's group; what it sees is what it saw
// when the worker was its own child.
//
// Runs in the child of a fork() of a multi-threaded process: everything below is
// async-signal-safe (system calls only, no allocation), and every string is built before fork().

#include <sys/types.h>

#include <csignal>

namespace cumulus::launch {

// The keeper's parent-death signal: only the kernel sends it (the keeper's group is its own).
constexpr int kKeeperDeathSignal = SIGUSR2;

// What the keeper needs, all prepared before fork().
struct KeeperArgs {
  pid_t launcher = 0;           // the launcher's pid, to notice it died before PDEATHSIG was set
  int output_fd = -1;           // the worker's stdout and stderr (the write end of its pipe)
  int pid_fd = -1;              // the keeper writes the worker's pid (a pid_t) here, then closes it
  char* const* argv = nullptr;  // the worker's command; argv[0] is looked up in PATH
  char* const* envp = nullptr;
  const char* exec_error = "";  // "cumulus-run: cannot execute <argv[0]>: " (then strerror)
};

// Becomes the keeper (see above); never returns. Call it in the child right after fork(), with
// SIGUSR1 blocked (the worker keeps it blocked until it asks for it).
[[noreturn]] void runKeeper(const KeeperArgs& args);

}  // namespace cumulus::launch
