// comm_perf: all-reduce throughput and latency with every rank a separate process on this host
// (fork, then rendezvous in a FileStore in a temporary directory). A measuring tool, not a test;
// the benchmark suite proper lives in bench/.
//
//   comm_perf [--world P] [--bytes N] [--iters K] [--algorithm ring|tree|auto]
//             [--segment BYTES] [--sockbuf BYTES] [--threads] [--hugepages]
// Prints, from rank 0: time per all-reduce (median and mean of K after 3 warm-ups),
// algbw = bytes / time and busbw = algbw · 2(p−1)/p (the NCCL convention).
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "file_store.h"

using namespace cumulus::comm;

namespace {

struct Args {
  int world = 2;
  size_t bytes = 64 << 20;
  int iters = 10;
  Algorithm algorithm = Algorithm::kRing;
  size_t segment = kDefaultSegmentBytes;
  int sockbuf = 4 << 20;
  bool threads = false;
  bool hugepages = false;
};

int runRank(const Args& a, int rank, Store& store) {
  CommunicatorOptions o;
  o.job_token = "perf";
  o.segment_bytes = a.segment;
  o.socket_buffer_bytes = a.sockbuf;
  Communicator comm(rank, a.world, store, o);
  // The buffer as a trainer would hold it; --hugepages asks for transparent huge pages.
  const size_t alloc = (a.bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  float* data = static_cast<float*>(std::aligned_alloc(2 << 20, alloc));
  if (a.hugepages) ::madvise(data, alloc, MADV_HUGEPAGE);
  std::fill(data, data + a.bytes / 4, 1.0f);
  Buffer b{data, a.bytes / 4, DType::kFloat32};
  // Rounds of back-to-back all-reduces (no barrier inside a round, so one rank's early start
  // cannot hide latency); a round's time / its length is one sample.
  const int perRound = a.bytes <= (1 << 20) ? 100 : 1;
  std::vector<double> times;
  double cpu = 0;  // this rank's CPU seconds (user + sys) in the timed rounds
  auto threadCpu = [] {
    timespec ts;
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  for (int i = 0; i < a.iters + 3; ++i) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    const double cpuStart = threadCpu();
    for (int k = 0; k < perRound; ++k) comm.allreduce(b, {ReduceOp::kSum, a.algorithm});
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (i >= 3) times.push_back(took.count() / perRound);
    if (i >= 3) cpu += threadCpu() - cpuStart;
  }
  // CPU per all-reduce summed over ranks: on a shared 2-core box this, not the wall clock, is
  // what the other tenants leave unmeasurable; wall >= cpu / cores on an idle machine.
  store.set("cpu/" + std::to_string(rank), std::to_string(cpu / (a.iters * perRound)));
  if (rank == 0) {
    double cpuPerOp = 0;
    for (int r = 0; r < a.world; ++r) cpuPerOp += std::stod(store.get("cpu/" + std::to_string(r)));
    std::sort(times.begin(), times.end());
    double mean = 0;
    for (double t : times) mean += t / times.size();
    const double median = times[times.size() / 2];
    const double algbw = double(a.bytes) / median / 1e9;
    std::printf(
        "%s p=%d bytes=%zu segment=%zu sockbuf=%d %s%s: median %.1f us, mean %.1f us, "
        "algbw %.3f GB/s, busbw %.3f GB/s, cpu %.1f us/op (all ranks)\n",
        algorithmName(comm.resolve(a.algorithm, a.bytes)), a.world, a.bytes, a.segment, a.sockbuf,
        a.threads ? "threads" : "processes", a.hugepages ? " hugepages" : "", median * 1e6,
        mean * 1e6, algbw, algbw * 2 * (a.world - 1) / a.world, cpuPerOp * 1e6);
    std::fflush(stdout);  // children leave with _exit
  }
  std::free(data);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (k == "--world")
      a.world = std::stoi(next());
    else if (k == "--bytes")
      a.bytes = std::stoull(next());
    else if (k == "--iters")
      a.iters = std::stoi(next());
    else if (k == "--algorithm")
      a.algorithm = parseAlgorithm(next());
    else if (k == "--segment")
      a.segment = std::stoull(next());
    else if (k == "--sockbuf")
      a.sockbuf = std::stoi(next());
    else if (k == "--threads")
      a.threads = true;
    else if (k == "--hugepages")
      a.hugepages = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  char pattern[] = "/tmp/comm-perf-XXXXXX";
  const std::string dir = ::mkdtemp(pattern);
  cumulus::comm::testing::FileStore store(dir);
  int failed = 0;
  if (a.threads) {
    std::vector<std::thread> ranks;
    for (int r = 0; r < a.world; ++r) ranks.emplace_back([&, r] { runRank(a, r, store); });
    for (auto& t : ranks) t.join();
  } else {
    std::vector<pid_t> children;
    for (int r = 0; r < a.world; ++r) {
      pid_t pid = ::fork();
      if (pid == 0) {
        try {
          ::_exit(runRank(a, r, store));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d: %s\n", r, e.what());
          ::_exit(1);
        }
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  std::filesystem::remove_all(dir);
  return failed;
}
