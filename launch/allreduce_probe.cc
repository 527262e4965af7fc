// cumulus-allreduce-probe: a worker that times all-reduce across the hosts of a job, one rank per
// process, started by cumulus-run on each host (so ranks can sit in different network namespaces,
// which cumulus-bench's forked local ranks cannot).
//
//   cumulus-run --nnodes P --node-rank I --rdzv-endpoint H:PORT [--parameter-server] --
//     cumulus-allreduce-probe [--algorithms funnel,tree,ring,auto] [--sizes 4096,65536,…]
//                             [--link-gbit 1] [--target-seconds 1.5] [--max-iters 20] [--out FILE]
//                             [--cost-model FILE] [--calibrate FILE] [--timeout S]
//
// Reads the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT, CUMULUS_JOB_TOKEN,
// CUMULUS_GENERATION, CUMULUS_BIND_HOST, CUMULUS_PS_ENDPOINT for funnel). Every rank fills its
// float32 buffer with rank+1 and checks the sum p(p+1)/2 after the first call of each point; a
// wrong sum exits 1 naming the point and index. Rank 0 prints one line per point and, with --out,
// appends TSV: algorithm world bytes iters median_s min_s predicted_s auto_pick busbw_MBps, where
// a call's time is the slowest rank's, each rank timing from its own exit of a barrier.
// The prediction is comm/cost_model.h with β = 1 / the link's TCP payload rate (--link-gbit times
// 1448/1514: MSS over an Ethernet frame with TCP timestamps) and the built-in α, γ. Every rank
// derives the same iteration count from that prediction, so no extra agreement is needed.
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

#include "base/run_env.h"
#include "base/user_error.h"
#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "comm/funnel.h"
#include "comm/store_client.h"
#include "launch/options.h"

namespace cumulus::launch {
namespace {

struct ProbeOptions {
  std::vector<comm::Algorithm> algorithms = {comm::Algorithm::kFunnel, comm::Algorithm::kTree,
                                             comm::Algorithm::kRing, comm::Algorithm::kAuto};
  std::vector<size_t> sizes = {4096, 65536, 1 << 20, 16 << 20};
  double link_gbit = 1.0;
  double target_seconds = 1.5;
  int max_iters = 20;
  double timeout_seconds = 120;  // --timeout: deadline of every collective
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

ProbeOptions parse(int argc, char** argv) {
  ProbeOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) throw UsageError(flag + " needs a value");
    std::string value = argv[++i];
    if (flag == "--algorithms") {
      o.algorithms.clear();
      for (auto& a : split(value)) {
        try {
          o.algorithms.push_back(comm::parseAlgorithm(a));
        } catch (const std::invalid_argument& e) {
          throw UsageError("--algorithms: " + std::string(e.what()));
        }
      }
    } else if (flag == "--sizes") {
      o.sizes.clear();
      for (auto& s : split(value)) {
        const long long bytes = std::atoll(s.c_str());
        if (bytes < 4 || bytes % 4 != 0) {
          throw UsageError("--sizes: " + s + " is not a positive multiple of 4 bytes");
        }
        o.sizes.push_back(static_cast<size_t>(bytes));
      }
    } else if (flag == "--link-gbit") {
      o.link_gbit = std::atof(value.c_str());
      if (!(o.link_gbit > 0)) throw UsageError("--link-gbit: expected a positive rate");
    } else if (flag == "--target-seconds") {
      o.target_seconds = std::atof(value.c_str());
    } else if (flag == "--max-iters") {
      o.max_iters = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--out") {
      o.out = value;
    } else if (flag == "--timeout") {
      o.timeout_seconds = std::atof(value.c_str());
      if (!(o.timeout_seconds > 0)) throw UsageError("--timeout: expected positive seconds");
    } else if (flag == "--cost-model") {
      o.cost_model = value;
    } else if (flag == "--calibrate") {
      o.calibrate = value;
    } else {
      throw UsageError("unknown flag " + flag);
    }
  }
  return o;
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
  for (auto [algorithm, hops] : {std::pair{comm::Algorithm::kTree, 2 * log2p},
                                 std::pair{comm::Algorithm::kRing, 2 * (world - 1)}}) {
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

int probe(const ProbeOptions& o) {
  const base::RunEnv env = base::RunEnv::fromGroupEnvironment(
      base::systemEnvironment, "start the probe with cumulus-run");
  const int rank = static_cast<int>(env.rank);
  const int world = static_cast<int>(env.world_size);
  const std::string token = env.job_token;
  comm::StoreClient store(env.master_addr, static_cast<int>(env.master_port), token);

  const double payload_bytes_per_s = o.link_gbit * 1e9 / 8 * 1448.0 / 1514.0;
  const comm::CostModel defaults;
  const comm::CostModel model =
      o.cost_model.empty()
          ? comm::CostModel(defaults.alpha(), 1.0 / payload_bytes_per_s, defaults.gamma())
          : comm::CostModel::load(o.cost_model);

  comm::CommunicatorOptions copts;
  copts.generation = static_cast<uint64_t>(env.generation);
  copts.jobToken = token;
  copts.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000));
  if (!env.bind_host.empty()) {
    copts.bindHost = env.bind_host;
  }
  copts.costModel = model;
  std::unique_ptr<comm::FunnelClient> funnel;
  if (!env.ps_endpoint.empty()) {
    const auto [host, port] = parseEndpoint(env.ps_endpoint, "CUMULUS_PS_ENDPOINT");
    funnel = std::make_unique<comm::FunnelClient>(host, port, token, rank, world, copts.generation);
    copts.remoteReducer = funnel.get();
  }
  comm::Communicator comm(rank, world, store, copts);
  std::unique_ptr<std::ofstream> out;
  if (rank == 0 && !o.out.empty()) {
    out = std::make_unique<std::ofstream>(o.out, std::ios::app);
    if (!*out) throw std::runtime_error("cannot append to " + o.out);
  }
  if (rank == 0) {
    std::printf("probe: %d rank(s), data plane on %s, link %.3g Gbit/s\n", world,
                copts.bindHost.c_str(), o.link_gbit);
    std::fflush(stdout);
  }

  if (!o.calibrate.empty()) return calibrate(o, comm, model, rank, world);

  const float expected = static_cast<float>(world) * static_cast<float>(world + 1) / 2.0f;
  for (size_t bytes : o.sizes) {
    std::vector<float> data(bytes / 4);
    comm::Buffer buffer{data.data(), data.size(), comm::DType::kFloat32};
    for (comm::Algorithm algorithm : o.algorithms) {
      if (algorithm == comm::Algorithm::kFunnel && !funnel) {
        throw UsageError(
            "--algorithms funnel needs a parameter server: give cumulus-run "
            "--parameter-server");
      }
      const bool has_funnel = funnel != nullptr;
      const comm::Algorithm concrete =
          algorithm == comm::Algorithm::kAuto ? comm.resolve(algorithm, bytes) : algorithm;
      const double predicted =
          model.predict(concrete, static_cast<double>(bytes), world, has_funnel);
      const int iters = std::clamp(static_cast<int>(o.target_seconds / std::max(predicted, 1e-6)),
                                   3, std::max(3, o.max_iters));
      comm::AllreduceOptions aopts;
      aopts.algorithm = algorithm;
      std::vector<double> times;
      for (int it = 0; it <= iters; ++it) {  // iteration 0 checks the answer and warms up
        std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        comm.allreduce(buffer, aopts);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        // One rank's clock is not the call's: ranks leave the barrier at different times, and a
        // late rank finds its peers' data already in its socket buffer. The slowest rank's time
        // (each from its own barrier exit) bounds the call from above by only the barrier skew.
        comm::Buffer slowest{&dt, 1, comm::DType::kFloat64};
        comm.allreduce(slowest, {comm::ReduceOp::kMax, comm::Algorithm::kTree});
        if (it == 0) {
          for (size_t i = 0; i < data.size(); i += std::max<size_t>(1, data.size() / 64)) {
            if (data[i] != expected) {
              std::fprintf(stderr, "probe: rank %d: %s %zu bytes: element %zu is %g, expected %g\n",
                           rank, comm::algorithmName(algorithm), bytes, i, data[i], expected);
              return 1;
            }
          }
        } else {
          times.push_back(dt);
        }
      }
      if (rank == 0) {
        const double med = median(times);
        const double busbw = static_cast<double>(bytes) / med * 2.0 * (world - 1) / world / 1e6;
        std::printf(
            "probe: %-6s p=%d %10zu B  %3d iters  median %9.6f s  min %9.6f s  "
            "predicted %9.6f s  busbw %7.1f MB/s%s%s\n",
            comm::algorithmName(algorithm), world, bytes, iters, med,
            *std::min_element(times.begin(), times.end()), predicted, busbw,
            algorithm == comm::Algorithm::kAuto ? "  auto->" : "",
            algorithm == comm::Algorithm::kAuto ? comm::algorithmName(concrete) : "");
        std::fflush(stdout);
        if (out) {
          *out << comm::algorithmName(algorithm) << '\t' << world << '\t' << bytes << '\t' << iters
               << '\t' << med << '\t' << *std::min_element(times.begin(), times.end()) << '\t'
               << predicted << '\t' << comm::algorithmName(concrete) << '\t' << busbw << '\n';
          out->flush();
        }
      }
    }
  }
  comm.barrier();
  return 0;
}

}  // namespace
}  // namespace cumulus::launch

int main(int argc, char** argv) {
  using namespace cumulus::launch;
  try {
    return probe(parse(argc, argv));
  } catch (const cumulus::base::UserError& e) {
    std::fprintf(stderr, "cumulus-allreduce-probe: %s\n", e.what());
    return cumulus::base::exitCodeFor(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cumulus-allreduce-probe: error: %s\n", e.what());
    return 1;
  }
}
