// cumulus-bench calibrate: measures the cost model's α, β, γ on this machine (2 ranks).
//
//   α  one-way latency of a small message: broadcasts of 4 bytes with the root alternating
//      0, 1, 0, …; each broadcast must wait for the previous one to arrive, so the loop is a
//      chain of one-way messages and α = time / broadcasts.
//   β  time per byte of a large transfer: the same chain with 64 MiB messages,
//      β = (time / broadcasts − α) / n.
//   γ  time per byte of a float32 sum kernel (comm/reduce.h) on 64 MiB, out of cache.
// Rank 0 writes them with comm::CostModel::save(--out) and prints them.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/bench.h"
#include "bench/group.h"
#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "comm/reduce.h"
#include "comm/store_client.h"

namespace cumulus::bench {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds per broadcast in a chain of `rounds` broadcasts with alternating roots; the best of
// `repeats` runs (the least disturbed by other load on the machine).
double chainedBroadcast(comm::Communicator& comm, size_t bytes, int rounds, int repeats) {
  std::vector<char> memory(bytes, 1);
  comm::Buffer buffer{memory.data(), bytes / 4, comm::DType::kFloat32};
  for (int i = 0; i < 4; ++i) comm.broadcast(buffer, i % 2);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    comm.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < rounds; ++i) comm.broadcast(buffer, i % 2);
    double t = secondsSince(start) / rounds;
    comm::Buffer slowest{&t, 1, comm::DType::kFloat64};
    comm::AllreduceOptions maxOpts;
    maxOpts.op = comm::ReduceOp::kMax;
    maxOpts.algorithm = comm::Algorithm::kTree;
    comm.allreduce(slowest, maxOpts);
    best = std::min(best, t);
  }
  return best;
}

double reductionSecondsPerByte() {
  constexpr size_t kBytes = 64u << 20;
  std::vector<float> dst(kBytes / 4, 1.0f), src(kBytes / 4, 2.0f);
  comm::reduceInto(dst.data(), src.data(), dst.size(), comm::DType::kFloat32, comm::ReduceOp::kSum);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto start = Clock::now();
    comm::reduceInto(dst.data(), src.data(), dst.size(), comm::DType::kFloat32,
                     comm::ReduceOp::kSum);
    best = std::min(best, secondsSince(start));
  }
  return best / kBytes;
}

}  // namespace

int runCalibrateWorker(const BenchOptions& o) {
  const WorkerEnv env = WorkerEnv::fromEnvironment();
  comm::StoreClient store("127.0.0.1", env.storePort, env.token);
  comm::CommunicatorOptions copts;
  copts.jobToken = env.token;
  copts.timeout = o.timeout;
  comm::Communicator comm(env.rank, env.world, store, copts);

  constexpr size_t kLarge = 64u << 20;
  const double alpha = chainedBroadcast(comm, 4, 2000, 5);
  const double large = chainedBroadcast(comm, kLarge, 8, 3);
  const double beta = std::max(0.0, (large - alpha) / kLarge);
  comm.barrier();
  if (env.rank != 0) return 0;
  const double gamma = reductionSecondsPerByte();
  const comm::CostModel model(alpha, beta, gamma);
  model.save(o.out);
  const comm::CostModel defaults;
  std::printf("# cumulus-bench calibrate: 2 ranks on 127.0.0.1\n");
  std::printf("alpha_s          %.3e   (4 B one-way message; built-in default %.3e)\n", alpha,
              defaults.alpha());
  std::printf("beta_s_per_byte  %.3e   (%.2f GB/s over 64 MiB messages; default %.3e)\n", beta,
              beta > 0 ? 1e-9 / beta : 0.0, defaults.beta());
  std::printf("gamma_s_per_byte %.3e   (%.2f GB/s float32 sum kernel; default %.3e)\n", gamma,
              1e-9 / gamma, defaults.gamma());
  std::printf("written to %s\n", o.out.c_str());
  std::printf(
      "{\"bench\":\"calibrate\",\"alpha_s\":%.4e,\"beta_s_per_byte\":%.4e,"
      "\"gamma_s_per_byte\":%.4e}\n",
      alpha, beta, gamma);
  return 0;
}

}  // namespace cumulus::bench
