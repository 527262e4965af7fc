// cumulus-bench calibrate: measures the cost model's α, β, γ on this machine (2 ranks), then what
// ranks beyond the cores cost (2·cores ranks).
//
//   α  one-way latency of a small message: broadcasts of 4 bytes with the root alternating
//      0, 1, 0, …; each broadcast must wait for the previous one to arrive, so the loop is a
//      chain of one-way messages and α = time / broadcasts.
//   β  time per byte of a large transfer: the same chain with 64 MiB messages,
//      β = (time / broadcasts − α) / n.
//   γ  time per byte of the float32 sum kernel (comm/reduce.h) as the algorithms call it: a hot
//      landing segment into a 64 MiB destination.
//   β table, per size regime and pattern (comm/cost_model.h): at n = --sizes (by default 1, 4,
//      16, 64 MiB), timed
//      2-rank all-reduces with the real algorithms, each solved for its β with the cost
//      model's formula (comm/cost_model.h) at p = 2 (the α and γ terms subtracted):
//        tree    t = 2α + 2nβ_oneway + nγ     (one message up, one down)
//        ring    t = 2α + nβ_duplex + nγ/2    (each rank sends and receives n/2 twice, at once)
//        funnel  t = 2α + 2nβ_funnel + nγ     (through the gRPC ParameterServer)
//      Every figure is the best of 5 rounds of mean-per-op (the statistic `allreduce` reports per
//      round): other tenants of a shared machine only ever slow a round down, so the fastest
//      round is the best estimate of what the machine itself does.
//   cores  the CPUs this process may run on (its affinity mask, as the trainer counts them;
//          hardware_concurrency() where that fails).
//   a second group, of P = --oversubscribed-world ranks (by default 2·cores), measures what ranks
//      beyond the cores cost, with the oversubscribed formulas of comm/cost_model.cc (q = P − 1,
//      c cores):
//      α_busy  a 4 KiB ring, whose time is all messages: t = ⌈P/c⌉·(q/P)·2Pα_busy;
//      busy_at at the same sizes as the β table, the tree and the ring, each solved for its CPU
//              work per byte:
//                tree    t = q(2α_busy + n·w_tree)/c
//                ring    t = ⌈P/c⌉·(q/P)·(2Pα_busy + n·w_ring)
//      Rank 0 adds them to the file the first group wrote.
// The transport is whatever the communicator picks (CUMULUS_TRANSPORT=tcp measures TCP).
// Rank 0 writes them with comm::CostModel::save(--out) and prints them.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/group.h"
#include "comm/collective.h"
#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "comm/funnel.h"
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
    maxOpts.algorithm = cumulus::Algorithm::kTree;
    comm.allreduce(slowest, maxOpts);
    best = std::min(best, t);
  }
  return best;
}

// As the ring and tree run it: a hot 512 KiB landing segment (kDefaultSegmentBytes) folded into
// a 64 MiB destination, segment after segment, so the destination streams from DRAM and the
// source stays in L2. Best of 5 passes (the least disturbed by other load).
double reductionSecondsPerByte() {
  constexpr size_t kBytes = 64u << 20;
  constexpr size_t kSegment = comm::kDefaultSegmentBytes / 4;  // floats
  std::vector<float> dst(kBytes / 4, 1.0f), landing(kSegment, 2.0f);
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    const auto start = Clock::now();
    for (size_t off = 0; off < dst.size(); off += kSegment) {
      comm::reduceInto(dst.data() + off, landing.data(), std::min(kSegment, dst.size() - off),
                       comm::DType::kFloat32, comm::ReduceOp::kSum);
    }
    if (r > 0) best = std::min(best, secondsSince(start));  // pass 0 only faults pages in
  }
  return best / kBytes;
}

// Seconds per all-reduce of `bytes` float32 with `algorithm`: the best of 5 rounds of the
// slowest rank's mean over a round.
double timedAllreduce(comm::Communicator& comm, cumulus::Algorithm algorithm, size_t bytes) {
  std::vector<float> memory(bytes / 4, 1.0f);
  comm::Buffer buffer{memory.data(), memory.size(), comm::DType::kFloat32};
  comm::AllreduceOptions opts;
  opts.algorithm = algorithm;
  const int iters = std::max(3, std::min(100, static_cast<int>((256u << 20) / bytes)));
  // A long warm-up: the funnel's gRPC channel grows its HTTP/2 flow-control window over the
  // first few dozen calls, and the cumulus-bench sweeps it is compared with warm up as long.
  for (int i = 0; i < std::max(2, iters / 5); ++i) comm.allreduce(buffer, opts);
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    comm.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) comm.allreduce(buffer, opts);
    double t = secondsSince(start) / iters;
    comm::Buffer slowest{&t, 1, comm::DType::kFloat64};
    comm::AllreduceOptions maxOpts;
    maxOpts.op = comm::ReduceOp::kMax;
    maxOpts.algorithm = cumulus::Algorithm::kTree;
    comm.allreduce(slowest, maxOpts);
    rounds.push_back(t);
  }
  return *std::min_element(rounds.begin(), rounds.end());
}

// The busy_at table: this group has more ranks than the host has cores.
int runBusyWorker(const BenchOptions& o, const WorkerEnv& env, comm::Communicator& comm) {
  const comm::CostModel pairs = comm::CostModel::load(o.out);  // the first group's file
  const double c = pairs.cores();
  const double p = env.world;
  const double q = p - 1;
  const double ringRanks = std::ceil(p / c) * q / p;  // one rank's share, times the waves
  const double alpha = timedAllreduce(comm, cumulus::Algorithm::kRing, 4096) / ringRanks / (2 * p);
  std::vector<comm::CostModel::WorkPoint> busy;
  for (size_t n : o.sizes) {
    const double bytes = static_cast<double>(n);
    comm::CostModel::WorkPoint point;
    point.bytes = bytes;
    const double tree = timedAllreduce(comm, cumulus::Algorithm::kTree, n);
    point.tree = std::max(0.0, (tree * c / q - 2 * alpha) / bytes);
    const double ring = timedAllreduce(comm, cumulus::Algorithm::kRing, n);
    point.ring = std::max(0.0, (ring / ringRanks - 2 * p * alpha) / bytes);
    busy.push_back(point);
  }
  comm.barrier();
  if (env.rank != 0) return 0;
  const comm::CostModel model(pairs.alpha(), pairs.gamma(), pairs.betas(), pairs.cores(),
                              {env.world, alpha, busy});
  model.save(o.out);
  std::printf("# %d ranks on %d cores: what ranks beyond the cores cost\n", env.world,
              pairs.cores());
  std::printf("alpha_busy_s     %.3e   (per message, from a 4 KiB ring; alpha_s %.3e)\n", alpha,
              pairs.alpha());
  std::printf(
      "# %10s %14s %14s   (derived from the 2-rank beta: tree 4*oneway+gamma, ring "
      "2*duplex+gamma)\n",
      "bytes", "work_tree", "work_ring");
  const comm::CostModel derived(pairs.alpha(), pairs.gamma(), pairs.betas(), pairs.cores());
  for (const auto& w : busy) {
    std::printf("  %10.0f %14.3e %14.3e   (derived %.3e, %.3e)\n", w.bytes, w.tree, w.ring,
                derived.workTree(w.bytes), derived.workRing(w.bytes));
  }
  std::printf("added to %s\n", o.out.c_str());
  return 0;
}

}  // namespace

int runCalibrateWorker(const BenchOptions& o) {
  const WorkerEnv env = WorkerEnv::fromEnvironment();
  comm::StoreClient store("127.0.0.1", env.store_port, env.token);
  comm::CommunicatorOptions copts;
  copts.job_token = env.token;
  copts.timeout = o.timeout;
  std::unique_ptr<comm::FunnelClient> funnel;
  if (env.ps_port > 0) {
    funnel = std::make_unique<comm::FunnelClient>("127.0.0.1", env.ps_port, env.token, env.rank,
                                                  env.world);
    copts.remote_reducer = funnel.get();
  }
  comm::Communicator comm(env.rank, env.world, store, copts);
  if (o.busy_phase) return runBusyWorker(o, env, comm);

  constexpr size_t kLarge = 64u << 20;
  const double alpha = chainedBroadcast(comm, 4, 2000, 5);
  const double large = chainedBroadcast(comm, kLarge, 8, 3);
  const double beta = std::max(0.0, (large - alpha) / kLarge);
  // γ on every rank (it is needed to solve the table), the same kernel the ring runs.
  const double gamma = reductionSecondsPerByte();
  std::vector<comm::CostModel::BetaPoint> table;
  for (size_t n : o.sizes) {
    const double bytes = static_cast<double>(n);
    comm::CostModel::BetaPoint point;
    point.bytes = bytes;
    const double tree = timedAllreduce(comm, cumulus::Algorithm::kTree, n);
    point.oneway = std::max(0.0, (tree - 2 * alpha - bytes * gamma) / (2 * bytes));
    const double ring = timedAllreduce(comm, cumulus::Algorithm::kRing, n);
    point.duplex = std::max(0.0, (ring - 2 * alpha - bytes * gamma / 2) / bytes);
    point.funnel = point.oneway;
    if (funnel) {
      const double viaServer = timedAllreduce(comm, cumulus::Algorithm::kFunnel, n);
      point.funnel = std::max(0.0, (viaServer - 2 * alpha - bytes * gamma) / (2 * bytes));
    }
    table.push_back(point);
  }
  // Each row stands as measured. (An earlier version kept the running maximum, on the theory that
  // a copy only gets dearer as the working set spills out of each cache level; but per-segment
  // costs amortize as n grows, so β can fall with n, and on the development VM the maximum
  // carried one slow 1 MiB round into every larger row: the TCP tree then ran at 0.77 of its
  // prediction from 4 to 16 MiB, bench/results/allreduce.md run 6.)
  const int cores = comm::usableCores();
  comm.barrier();
  if (env.rank != 0) return 0;
  const comm::CostModel model(alpha, gamma, table, cores);
  model.save(o.out);
  const comm::CostModel defaults;
  std::printf("# cumulus-bench calibrate: 2 ranks on 127.0.0.1\n");
  std::printf("alpha_s          %.3e   (4 B one-way message; built-in default %.3e)\n", alpha,
              defaults.alpha());
  std::printf("beta_s_per_byte  %.3e   (%.2f GB/s over 64 MiB messages; default %.3e)\n", beta,
              beta > 0 ? 1e-9 / beta : 0.0, defaults.beta());
  std::printf("gamma_s_per_byte %.3e   (%.2f GB/s float32 sum kernel; default %.3e)\n", gamma,
              1e-9 / gamma, defaults.gamma());
  std::printf("cores            %d\n", cores);
  std::printf("# %10s %14s %14s %14s   (seconds per byte; transport to rank 1: %s)\n", "bytes",
              "beta_oneway", "beta_duplex", "beta_funnel", comm.transportTo(1));
  for (const auto& p : table) {
    std::printf("  %10.0f %14.3e %14.3e %14.3e\n", p.bytes, p.oneway, p.duplex, p.funnel);
  }
  std::printf("written to %s\n", o.out.c_str());
  const nlohmann::ordered_json row{{"bench", "calibrate"},
                                   {"alpha_s", alpha},
                                   {"beta_s_per_byte", beta},
                                   {"gamma_s_per_byte", gamma}};
  std::printf("%s\n", row.dump().c_str());
  return 0;
}

int runCalibrate(int argc, char** argv, const BenchOptions& o) {
  // The pairwise group times the funnel too, so it needs the parameter server.
  const int pairs = runGroup(argc, argv, 2, /*withParameterServer=*/true, o.timeout * 2);
  if (pairs != 0 || o.oversubscribed_world == 0) return pairs;
  const int cores = comm::usableCores();
  const int world = o.oversubscribed_world > 0 ? o.oversubscribed_world : std::min(64, 2 * cores);
  if (world <= cores) {
    std::printf(
        "# no busy_at table: %d ranks do not outnumber the %d cores (pass "
        "--oversubscribed-world with more)\n",
        world, cores);
    return 0;
  }
  std::vector<char*> args(argv, argv + argc);
  char flag[] = "--busy-phase";
  args.push_back(flag);
  return runGroup(static_cast<int>(args.size()), args.data(), world, false, o.timeout * 2);
}

}  // namespace cumulus::bench
