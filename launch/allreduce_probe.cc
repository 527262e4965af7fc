// cumulus-allreduce-probe: a worker that times all-reduce across the hosts of a job, one rank per
// process, started by cumulus-run on each host (so ranks can sit in different network namespaces,
// which cumulus-bench's forked local ranks cannot). With --nproc-per-node L several ranks share
// each host, which is what `hierarchical` is for.
//
//   cumulus-run --nnodes P [--nproc-per-node L] --node-rank I --rdzv-endpoint H:PORT
//       [--parameter-server] --
//     cumulus-allreduce-probe [--algorithms funnel,tree,ring,hierarchical,auto] [--sizes 4096,…]
//                             [--link-gbit 1] [--target-seconds 1.5] [--max-iters 20] [--out FILE]
//                             [--cost-model FILE] [--calibrate FILE] [--timeout S]
//                             [--rendezvous-timeout S]
//
// Reads the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT, CUMULUS_JOB_TOKEN,
// CUMULUS_GENERATION, CUMULUS_BIND_HOST, CUMULUS_PS_ENDPOINT for funnel). Every rank fills its
// float32 buffer with rank+1 and checks the sum p(p+1)/2 after the first call of each point; a
// wrong sum exits 1 naming the point and index. Rank 0 prints one line per point and, with --out,
// appends TSV: algorithm world bytes iters median_s min_s predicted_s auto_pick busbw_MBps, where
// a call's time is the slowest rank's, each rank timing from its own exit of a barrier.
// The prediction is comm/cost_model.h with β = 1 / the link's TCP payload rate (--link-gbit times
// 1448/1514: MSS over an Ethernet frame with TCP timestamps) and the built-in α, γ. Every rank
// derives the same iteration count from that prediction, so no extra agreement is needed. The
// prediction uses the group's topology (hosts × ranks per host, as the rendezvous found it):
// hierarchical's local passes are priced with the model's α_l, β_l (by default the built-in,
// loopback-measured α and β).
// --calibrate FILE measures α on this cluster (see calibrate()), writes α, that β and γ in
// comm/cost_model.h's format and exits; a second run with --cost-model FILE then predicts and
// picks `auto` (inside the Communicator, as comm.cost_model does for training) with it.
// Exit: 0 ok, 1 a wrong sum or a communication error (its text names op, seq and peer), 2 usage.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "base/run_env.h"
#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "comm/funnel.h"
#include "comm/store_client.h"
#include "launch/options.h"

namespace cumulus::launch {
namespace {

constexpr const char* kProgram = "cumulus-allreduce-probe";

struct ProbeOptions {
  std::vector<cumulus::Algorithm> algorithms = {
      cumulus::Algorithm::kFunnel, cumulus::Algorithm::kTree, cumulus::Algorithm::kRing,
      cumulus::Algorithm::kAuto};
  std::vector<size_t> sizes = {4096, 65536, 1 << 20, 16 << 20};
  double link_gbit = 1.0;
  double target_seconds = 1.5;
  int max_iters = 20;
  double timeout_seconds = 120;     // --timeout: deadline of every collective
  double rendezvous_seconds = 120;  // --rendezvous-timeout: deadline of joining the group
  std::string out;
  std::string cost_model;  // --cost-model FILE: α, β, γ for predictions and auto
  std::string calibrate;   // --calibrate FILE: measure α here, write the model, exit
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Declares the flags, bound to `o`; the lists are parsed in their callbacks so that a mistake
// names the flag and the item.
void addFlags(CLI::App& app, ProbeOptions& o) {
  app.add_option_function<std::string>(
         "--algorithms",
         [&o](const std::string& value) {
           o.algorithms.clear();
           for (const std::string& a : split(value)) {
             try {
               o.algorithms.push_back(cumulus::parseAlgorithm(a));
             } catch (const cumulus::UserError& e) {
               throw UsageError("--algorithms: " + std::string(e.what()));
             }
           }
         },
         "algorithms to time: funnel, tree, ring, hierarchical, auto (default "
         "funnel,tree,ring,auto)")
      ->type_name("LIST");
  app.add_option_function<std::string>(
         "--sizes",
         [&o](const std::string& value) {
           o.sizes.clear();
           for (const std::string& s : split(value)) {
             const int64_t bytes = base::parseInteger(s, "--sizes", 4, int64_t{1} << 40);
             if (bytes % 4 != 0) {
               throw UsageError("--sizes: " + s + " is not a positive multiple of 4 bytes");
             }
             o.sizes.push_back(static_cast<size_t>(bytes));
           }
         },
         "bytes per all-reduce, multiples of 4 (default 4096,65536,1048576,16777216)")
      ->type_name("LIST");
  app.add_option("--link-gbit", o.link_gbit, "the link's rate, for predictions (default 1)")
      ->type_name("G")
      ->transform(base::positiveNumber("rate in Gbit/s", 1e6));
  app.add_option("--target-seconds", o.target_seconds,
                 "time each point for about S seconds (default 1.5)")
      ->type_name("S")
      ->transform(base::positiveNumber("number of seconds", 86400));
  app.add_option("--max-iters", o.max_iters, "at most N timed calls per point (default 20)")
      ->type_name("N")
      ->transform(base::integerIn(1, 1000000));
  app.add_option("--out", o.out, "rank 0 appends one TSV line per point to FILE")
      ->type_name("FILE");
  app.add_option("--timeout", o.timeout_seconds, "deadline of every collective (default 120)")
      ->type_name("S")
      ->transform(base::positiveNumber("number of seconds", 86400));
  app.add_option("--rendezvous-timeout", o.rendezvous_seconds,
                 "deadline of joining the group, however short --timeout is (default 120)")
      ->type_name("S")
      ->transform(base::positiveNumber("number of seconds", 86400));
  app.add_option("--cost-model", o.cost_model, "alpha, beta, gamma for predictions and auto")
      ->type_name("FILE");
  app.add_option("--calibrate", o.calibrate, "measure alpha here, write the model to FILE, exit")
      ->type_name("FILE");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// α on this cluster: one-float all-reduces, where nβ and nγ vanish, so tree costs 2⌈log₂p⌉α and
// ring 2(p−1)α. Both are timed (median of 30) and α is their least-squares fit, so it holds the
// per-hop cost as the algorithms see it — here including the wake-ups of ranks that share cores.
int calibrate(const ProbeOptions& o, comm::Communicator& comm, const comm::CostModel& model,
              int rank, int world) {
  float value = 1.0f;
  comm::Buffer one{&value, 1, comm::DType::kFloat32};
  int log2p = 0;
  while ((1 << log2p) < world) ++log2p;
  double sum_kt = 0, sum_kk = 0;
  for (auto [algorithm, hops] : {std::pair{cumulus::Algorithm::kTree, 2 * log2p},
                                 std::pair{cumulus::Algorithm::kRing, 2 * (world - 1)}}) {
    comm::AllreduceOptions aopts;
    aopts.algorithm = algorithm;
    std::vector<double> times;
    for (int it = 0; it < 31; ++it) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      comm.allreduce(one, aopts);
      if (it > 0) {
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    sum_kt += hops * median(times);
    sum_kk += static_cast<double>(hops) * hops;
  }
  const double alpha = world > 1 ? sum_kt / sum_kk : model.alpha();
  if (rank == 0) {
    comm::CostModel(alpha, model.beta(), model.gamma()).save(o.calibrate);
    std::printf("probe: calibrated alpha %.2f us (beta %.3g s/B, gamma %.3g s/B) -> %s\n",
                alpha * 1e6, model.beta(), model.gamma(), o.calibrate.c_str());
  }
  comm.barrier();
  return 0;
}

// One rank's view of the job: its place in the group and the communicator with its parts.
struct ProbeGroup {
  int rank = 0;
  int world = 1;
  comm::CostModel model;
  std::unique_ptr<comm::StoreClient> store;
  std::unique_ptr<comm::FunnelClient> funnel;  // with a parameter server (CUMULUS_PS_ENDPOINT)
  std::unique_ptr<comm::Communicator> comm;
  std::string bind_host;
};

// Joins the group that cumulus-run started (the torchrun environment) with the cost model the
// flags name.
ProbeGroup joinGroup(const ProbeOptions& o) {
  const base::RunEnv env = base::RunEnv::fromGroupEnvironment(base::systemEnvironment,
                                                              "start the probe with cumulus-run");
  ProbeGroup g;
  g.rank = static_cast<int>(env.rank);
  g.world = static_cast<int>(env.world_size);
  g.store = std::make_unique<comm::StoreClient>(env.store_host, static_cast<int>(env.store_port),
                                                env.job_token);
  const double payload_bytes_per_s = o.link_gbit * 1e9 / 8 * 1448.0 / 1514.0;
  const comm::CostModel defaults;
  g.model = o.cost_model.empty()
                ? comm::CostModel(defaults.alpha(), 1.0 / payload_bytes_per_s, defaults.gamma())
                : comm::CostModel::load(o.cost_model);
  comm::CommunicatorOptions copts;
  copts.generation = static_cast<uint64_t>(env.generation);
  copts.job_token = env.job_token;
  copts.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000));
  copts.rendezvous_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(o.rendezvous_seconds * 1000));
  if (!env.bind_host.empty()) copts.bind_host = env.bind_host;
  copts.cost_model = g.model;
  if (!env.ps_endpoint.empty()) {
    const auto [host, port] = parseEndpoint(env.ps_endpoint, "CUMULUS_PS_ENDPOINT");
    g.funnel = std::make_unique<comm::FunnelClient>(host, port, env.job_token, g.rank, g.world,
                                                    copts.generation);
    copts.remote_reducer = g.funnel.get();
  }
  g.bind_host = copts.bind_host;
  g.comm = std::make_unique<comm::Communicator>(g.rank, g.world, *g.store, copts);
  return g;
}

struct PointResult {
  int iters = 0;
  double predicted = 0;
  cumulus::Algorithm concrete = cumulus::Algorithm::kRing;
  std::vector<double> times;  // the slowest rank's, per timed call
  bool correct = true;
};

// Times `algorithm` on `bytes`: iteration 0 checks the sum p(p+1)/2 and warms up, the others
// are timed.
PointResult timePoint(const ProbeOptions& o, ProbeGroup& g, cumulus::Algorithm algorithm,
                      size_t bytes) {
  if (algorithm == cumulus::Algorithm::kFunnel && !g.funnel) {
    throw UsageError(
        "--algorithms funnel needs a parameter server: give cumulus-run --parameter-server");
  }
  PointResult r;
  r.concrete =
      algorithm == cumulus::Algorithm::kAuto ? g.comm->resolve(algorithm, bytes) : algorithm;
  r.predicted = g.model.predict(r.concrete, static_cast<double>(bytes), g.comm->topology(),
                                g.funnel != nullptr);
  r.iters = std::clamp(static_cast<int>(o.target_seconds / std::max(r.predicted, 1e-6)), 3,
                       std::max(3, o.max_iters));
  const float expected = static_cast<float>(g.world) * static_cast<float>(g.world + 1) / 2.0f;
  std::vector<float> data(bytes / 4);
  comm::Buffer buffer{data.data(), data.size(), comm::DType::kFloat32};
  comm::AllreduceOptions aopts;
  aopts.algorithm = algorithm;
  for (int it = 0; it <= r.iters; ++it) {
    std::fill(data.begin(), data.end(), static_cast<float>(g.rank + 1));
    g.comm->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    g.comm->allreduce(buffer, aopts);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // One rank's clock is not the call's: ranks leave the barrier at different times, and a
    // late rank finds its peers' data already in its socket buffer. The slowest rank's time
    // (each from its own barrier exit) bounds the call from above by only the barrier skew.
    comm::Buffer slowest{&dt, 1, comm::DType::kFloat64};
    g.comm->allreduce(slowest, {comm::ReduceOp::kMax, cumulus::Algorithm::kTree});
    if (it > 0) {
      r.times.push_back(dt);
      continue;
    }
    for (size_t i = 0; i < data.size(); i += std::max<size_t>(1, data.size() / 64)) {
      if (data[i] != expected) {
        std::fprintf(stderr, "probe: rank %d: %s %zu bytes: element %zu is %g, expected %g\n",
                     g.rank, cumulus::algorithmName(algorithm), bytes, i, data[i], expected);
        r.correct = false;
        return r;
      }
    }
  }
  return r;
}

// Rank 0's line on the console and, with --out, in the TSV file.
void report(const ProbeGroup& g, cumulus::Algorithm algorithm, size_t bytes, const PointResult& r,
            std::ofstream* out) {
  const double med = median(r.times);
  const double fastest = *std::min_element(r.times.begin(), r.times.end());
  const double busbw = static_cast<double>(bytes) / med * 2.0 * (g.world - 1) / g.world / 1e6;
  const bool is_auto = algorithm == cumulus::Algorithm::kAuto;
  std::printf(
      "probe: %-12s p=%d %10zu B  %3d iters  median %9.6f s  min %9.6f s  "
      "predicted %9.6f s  busbw %7.1f MB/s%s%s\n",
      cumulus::algorithmName(algorithm), g.world, bytes, r.iters, med, fastest, r.predicted, busbw,
      is_auto ? "  auto->" : "", is_auto ? cumulus::algorithmName(r.concrete) : "");
  std::fflush(stdout);
  if (out == nullptr) return;
  *out << cumulus::algorithmName(algorithm) << '\t' << g.world << '\t' << bytes << '\t' << r.iters
       << '\t' << med << '\t' << fastest << '\t' << r.predicted << '\t'
       << cumulus::algorithmName(r.concrete) << '\t' << busbw << '\n';
  out->flush();
}

int probe(const ProbeOptions& o) {
  ProbeGroup g = joinGroup(o);
  std::unique_ptr<std::ofstream> out;
  if (g.rank == 0 && !o.out.empty()) {
    out = std::make_unique<std::ofstream>(o.out, std::ios::app);
    if (!*out) throw std::runtime_error("cannot append to " + o.out);
  }
  if (g.rank == 0) {
    std::printf("probe: %d rank(s), data plane on %s, link %.3g Gbit/s\n", g.world,
                g.bind_host.c_str(), o.link_gbit);
    const comm::Topology& t = g.comm->topology();
    if (t.uniform()) {
      std::printf("probe: %d host(s) x %d rank(s)\n", t.hosts(), t.localSize());
    } else {
      std::printf("probe: %d host(s), uneven (hierarchical runs the flat ring)\n", t.hosts());
    }
    std::fflush(stdout);
  }
  if (!o.calibrate.empty()) return calibrate(o, *g.comm, g.model, g.rank, g.world);
  for (size_t bytes : o.sizes) {
    for (cumulus::Algorithm algorithm : o.algorithms) {
      const PointResult r = timePoint(o, g, algorithm, bytes);
      if (!r.correct) return 1;
      if (g.rank == 0) report(g, algorithm, bytes, r, out.get());
    }
  }
  g.comm->barrier();
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{
      "Times all-reduce across the hosts of a job, one rank per process (started by "
      "cumulus-run).",
      kProgram};
  base::setUpCommandLine(app,
                         "0 ok, 1 a wrong sum or a communication error (its text names op, seq "
                         "and peer), 2 usage");
  ProbeOptions o;
  addFlags(app, o);
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  return probe(o);
}

}  // namespace
}  // namespace cumulus::launch

int main(int argc, char** argv) {
  try {
    return cumulus::launch::run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError(cumulus::launch::kProgram, e);
  }
}
