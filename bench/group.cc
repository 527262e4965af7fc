#include "bench/group.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/exec_env.h"
#include "base/host_port.h"
#include "base/run_env.h"
#include "comm/parameter_server.h"
#include "comm/store_server.h"

namespace cumulus::bench {

namespace {

std::string randomToken() {
  std::random_device device;
  char text[33];
  for (int i = 0; i < 32; ++i) text[i] = "0123456789abcdef"[device() % 16];
  text[32] = '\0';
  return text;
}

}  // namespace

WorkerEnv WorkerEnv::fromEnvironment() {
  const base::RunEnv run = base::RunEnv::fromGroupEnvironment(
      base::systemEnvironment, "cumulus-bench starts its workers itself; run it without --worker");
  WorkerEnv env;
  env.rank = static_cast<int>(run.rank);
  env.world = static_cast<int>(run.world_size);
  env.store_port = static_cast<int>(run.store_port);
  if (!run.ps_endpoint.empty()) {  // the parameter server that runGroup started
    std::string problem;
    const std::optional<base::HostPort> ps = base::parseHostPort(run.ps_endpoint, &problem);
    if (!ps) throw std::runtime_error("CUMULUS_PS_ENDPOINT: " + problem);
    env.ps_port = ps->port;
  }
  env.token = run.job_token;
  return env;
}

namespace {

// Each rank's arguments (this command line plus --worker) and environment, built before any
// fork(): the Store and the parameter server run threads, so the children may not allocate
// before their exec.
std::vector<std::unique_ptr<base::ExecArgs>> rankExecs(int argc, char** argv, int world,
                                                       int storePort, const std::string& token,
                                                       const comm::ParameterServer* ps) {
  std::vector<std::string> args(argv, argv + argc);
  args.push_back("--worker");
  std::vector<std::unique_ptr<base::ExecArgs>> execs;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<base::ExecArgs::Change> changes{
        {"RANK", std::to_string(rank)},
        {"LOCAL_RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_WORLD_SIZE", std::to_string(world)},  // one host
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(storePort)},
        {"CUMULUS_JOB_TOKEN", token}};
    // Not one the bench's caller may have set.
    changes.emplace_back("CUMULUS_PS_ENDPOINT",
                         ps ? std::optional<std::string>("127.0.0.1:" + std::to_string(ps->port()))
                            : std::nullopt);
    execs.push_back(std::make_unique<base::ExecArgs>(args, changes));
  }
  return execs;
}

// Reaps the ranks; the first failure (or the overall timeout) takes the others down. 0 when every
// rank exited 0.
int reapRanks(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  int result = 0;
  size_t alive = pids.size();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (alive > 0) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "cumulus-bench: workers still running after %lld s; killing them\n",
                     static_cast<long long>(timeout.count() / 1000));
        for (pid_t p : pids) kill(p, SIGKILL);
        result = 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (done < 0) break;
    --alive;
    int rank = 0;
    for (size_t r = 0; r < pids.size(); ++r)
      if (pids[r] == done) rank = static_cast<int>(r);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && result == 0) {
      if (WIFSIGNALED(status))
        std::fprintf(stderr, "cumulus-bench: rank %d killed by signal %d\n", rank,
                     WTERMSIG(status));
      else
        std::fprintf(stderr, "cumulus-bench: rank %d exited with %d\n", rank, WEXITSTATUS(status));
      result = 1;
      for (pid_t p : pids)
        if (p != done) kill(p, SIGTERM);
    }
  }
  return result;
}

}  // namespace

int runGroup(int argc, char** argv, int world, bool withParameterServer,
             std::chrono::milliseconds timeout) {
  const std::string token = randomToken();
  comm::StoreServer store("127.0.0.1", 0, token);
  std::unique_ptr<comm::ParameterServer> ps;
  if (withParameterServer)
    ps = std::make_unique<comm::ParameterServer>("127.0.0.1", 0, token, world);
  std::vector<std::unique_ptr<base::ExecArgs>> execs =
      rankExecs(argc, argv, world, store.port(), token, ps.get());
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    base::ExecArgs& exec = *execs[static_cast<size_t>(rank)];
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("cumulus-bench: fork");
      for (pid_t p : pids) kill(p, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      execve("/proc/self/exe", exec.argv(), exec.envp());
      static const char kExecFailed[] = "cumulus-bench: cannot execute /proc/self/exe\n";
      (void)!write(STDERR_FILENO, kExecFailed, sizeof kExecFailed - 1);
      _exit(127);
    }
    pids.push_back(pid);
  }

  return reapRanks(pids, timeout);
}

}  // namespace cumulus::bench
