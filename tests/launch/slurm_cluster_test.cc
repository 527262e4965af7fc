// cumulus-run under a real Slurm: launch/slurm/one-host-cluster.sh starts munged, slurmctld and
// slurmd from Debian's packages on private ports and state; `srun cumulus-run` trains, `scancel`
// (Slurm's SIGTERM before the kill, as for a preemption or a time limit) takes the preemption
// path, exit 75, and a second srun resumes from that checkpoint and finishes. Skipped, with the
// reason, where the cluster cannot run (not root, packages missing, daemons refusing to start).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace cumulus::launch {
namespace {

namespace fs = std::filesystem;

struct Shell {
  int exit_code = -1;
  std::string output;
};

Shell runShell(const std::string& command) {
  Shell r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    r.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

TEST(SlurmCluster, SrunTrainsScancelPreemptsAndTheNextSrunResumes) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("slurm_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string run = CUMULUS_BINARY_DIR "/bin/cumulus-run";
  const std::string train = CUMULUS_BINARY_DIR "/bin/cumulus-train";
  // ~3000 one-millisecond steps, so the scancel lands mid-run; a checkpoint every 500 steps.
  const std::string job =
      "srun -N1 -n1 -c2 " + run + " --nproc-per-node 2 --log-dir " +
      quote((dir / "logs").string()) + " -- " + train + " " +
      CUMULUS_SOURCE_DIR "/configs/smoke.yaml --set trainer.epochs=200" +
      " --set checkpoint.every_steps=500 --set trainer.run_dir=" + quote((dir / "run").string());
  const std::string first = (dir / "first.out").string();
  const std::string driver = (dir / "driver.sh").string();
  std::ofstream(driver) << "(" << job << " > " << first << " 2>&1; echo \"first srun exit $?\" >> "
                        << first << ") &\n"
                        << "for i in $(seq 600); do grep -q 'first step' " << first
                        << " && break; sleep 0.1; done\n"
                        << "sleep 0.3\nscancel $(squeue -h -o %i)\nwait\ncat " << first << "\n"
                        << "echo '--- second'\n"
                        << job << "\necho \"second srun exit $?\"\n";
  const Shell r = runShell(
      "timeout 180 " CUMULUS_SOURCE_DIR "/launch/slurm/one-host-cluster.sh with -- bash " + driver);
  // 3: not root or no Slurm; 4: the daemons did not come up on this machine (their logs follow).
  // Both are about the machine, not about cumulus-run under Slurm.
  if (r.exit_code == 3 || r.exit_code == 4) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t split = r.output.find("--- second");
  ASSERT_NE(split, std::string::npos) << r.output;
  const std::string before = r.output.substr(0, split);
  const std::string after = r.output.substr(split);

  // Slurm's job id names the run; the SIGTERM is a notice; the launcher and srun exit 75.
  EXPECT_TRUE(std::regex_search(before, std::regex("cumulus-run: run slurm-[0-9]+,"))) << before;
  EXPECT_NE(before.find("cumulus-run: preemption notice (SIGTERM)"), std::string::npos) << before;
  std::smatch stop;
  ASSERT_TRUE(std::regex_search(
      before, stop, std::regex("cumulus-run: preempted at step ([0-9]+), checkpoint (\\S+)")))
      << before;
  EXPECT_NE(before.find("first srun exit 75"), std::string::npos) << before;
  const std::string step = stop[1];

  // The next srun (a new job id) resumes from that very step and finishes all 3200 steps.
  EXPECT_NE(after.find("resuming from " + stop[2].str() + " at step " + step), std::string::npos)
      << after;
  EXPECT_NE(after.find("[rank0] trained " + std::to_string(3200 - std::stoll(step)) + " steps"),
            std::string::npos)
      << after;
  EXPECT_NE(after.find("cumulus-run: all 2 worker(s) finished"), std::string::npos) << after;
  EXPECT_NE(after.find("second srun exit 0"), std::string::npos) << after;
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace cumulus::launch
