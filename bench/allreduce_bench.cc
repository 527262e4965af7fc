// cumulus-bench allreduce: nccl-tests-style all-reduce sweep.
//
// Per size: one checked all-reduce (rank r contributes r+1, every element must equal
// p(p+1)/2), then warm-up, a barrier, and `iters` timed all-reduces of zeros. The time of a row
// is the slowest rank's mean per iteration (a max all-reduce of the ranks' means).
//   algbw = bytes / time,  busbw = algbw · 2(p−1)/p  (nccl-tests' all-reduce bus bandwidth)
// `model` is comm::CostModel's prediction for the algorithm that ran.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/group.h"
#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "comm/funnel.h"
#include "comm/store_client.h"

namespace cumulus::bench {

namespace {

using Clock = std::chrono::steady_clock;

void fill(comm::Buffer& b, double value) {
  for (size_t i = 0; i < b.count; ++i) switch (b.dtype) {
      case comm::DType::kFloat32:
        static_cast<float*>(b.data)[i] = static_cast<float>(value);
        break;
      case comm::DType::kFloat64:
        static_cast<double*>(b.data)[i] = value;
        break;
      case comm::DType::kInt32:
        static_cast<int32_t*>(b.data)[i] = static_cast<int32_t>(value);
        break;
      case comm::DType::kInt64:
        static_cast<int64_t*>(b.data)[i] = static_cast<int64_t>(value);
        break;
      default:
        throw std::invalid_argument("unsupported bench dtype");
    }
}

double at(const comm::Buffer& b, size_t i) {
  switch (b.dtype) {
    case comm::DType::kFloat32:
      return static_cast<const float*>(b.data)[i];
    case comm::DType::kFloat64:
      return static_cast<const double*>(b.data)[i];
    case comm::DType::kInt32:
      return static_cast<const int32_t*>(b.data)[i];
    case comm::DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(b.data)[i]);
    default:
      return 0;
  }
}

// Fills every rank's buffer with rank + 1, all-reduces it once and checks each element against
// 1 + 2 + ... + p; leaves the buffer zeroed for the timed calls.
void checkSum(comm::Communicator& comm, comm::Buffer buffer, const comm::AllreduceOptions& options,
              int rank, int p) {
  fill(buffer, rank + 1);
  comm.allreduce(buffer, options);
  const double want = p * (p + 1) / 2.0;
  for (size_t i = 0; i < buffer.count; ++i) {
    if (at(buffer, i) != want) {
      throw std::runtime_error("wrong all-reduce result at index " + std::to_string(i) + " of " +
                               std::to_string(buffer.bytes()) +
                               " bytes: " + std::to_string(at(buffer, i)) + " instead of " +
                               std::to_string(want));
    }
  }
  fill(buffer, 0);
}

// Seconds per all-reduce over `iters` calls after `warmup`, the slowest rank's (every rank gets
// it: the figure a synchronous step would see).
double slowestSeconds(comm::Communicator& comm, comm::Buffer buffer,
                      const comm::AllreduceOptions& options, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) comm.allreduce(buffer, options);
  comm.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) comm.allreduce(buffer, options);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  comm::Buffer slowest{&seconds, 1, comm::DType::kFloat64};
  comm::AllreduceOptions max_options;
  max_options.op = comm::ReduceOp::kMax;
  max_options.algorithm = cumulus::Algorithm::kTree;
  comm.allreduce(slowest, max_options);
  return seconds;
}

// One size's figures, as rank 0 prints them.
struct Row {
  cumulus::Algorithm asked;
  cumulus::Algorithm ran;
  int world;
  comm::Buffer buffer;
  int iters;
  double seconds;
  double algbw;
  double busbw;
  double model;
  const char* transport;
};

// The row as a JSON line, rounded as the table is so that it stays short: the table's precision
// is all there is.
std::string jsonRow(const Row& r) {
  const auto rounded = [](double x, int digits) {
    const double scale = std::pow(10.0, digits);
    return std::round(x * scale) / scale;
  };
  return nlohmann::ordered_json{{"bench", "allreduce"},
                                {"impl", "cumulus"},
                                {"algo", cumulus::algorithmName(r.asked)},
                                {"ran", cumulus::algorithmName(r.ran)},
                                {"world", r.world},
                                {"bytes", r.buffer.bytes()},
                                {"count", r.buffer.count},
                                {"dtype", comm::dtypeName(r.buffer.dtype)},
                                {"iters", r.iters},
                                {"time_us", rounded(r.seconds * 1e6, 2)},
                                {"algbw_GBps", rounded(r.algbw, 4)},
                                {"busbw_GBps", rounded(r.busbw, 4)},
                                {"model_us", rounded(r.model * 1e6, 2)},
                                {"transport", r.transport}}
      .dump();
}

}  // namespace

int runAllreduceWorker(const BenchOptions& o) {
  const WorkerEnv env = WorkerEnv::fromEnvironment();
  comm::StoreClient store("127.0.0.1", env.store_port, env.token);
  comm::CommunicatorOptions copts;
  copts.job_token = env.token;
  copts.timeout = o.timeout;
  if (!o.cost_model_path.empty()) copts.cost_model = comm::CostModel::load(o.cost_model_path);
  if (o.hosts > 1) copts.host_id = "bench-host-" + std::to_string(env.rank / (env.world / o.hosts));
  std::unique_ptr<comm::FunnelClient> funnel;
  if (env.ps_port > 0) {
    funnel = std::make_unique<comm::FunnelClient>("127.0.0.1", env.ps_port, env.token, env.rank,
                                                  env.world);
    copts.remote_reducer = funnel.get();
  }
  comm::Communicator comm(env.rank, env.world, store, copts);
  const int p = env.world;
  const size_t element = comm::elementSize(o.dtype);
  std::vector<char> memory(o.sizes.back() + element);

  if (env.rank == 0) {
    std::printf("# cumulus-bench allreduce: algo %s, world %d, dtype %s, op sum, loopback %s\n",
                cumulus::algorithmName(o.algorithm), p, comm::dtypeName(o.dtype),
                p > 1 ? comm.transportTo(1) : "-");
    if (o.hosts > 1) {
      std::printf("# %d simulated hosts x %d ranks, %s between hosts\n", o.hosts, p / o.hosts,
                  comm.transportTo(p / o.hosts));
    }
    std::printf("# %10s %11s %8s %6s %7s %11s %11s %11s %10s\n", "size(B)", "count", "type", "algo",
                "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "model(us)");
    std::fflush(stdout);
  }
  std::vector<std::string> rows;
  for (size_t bytes : o.sizes) {
    comm::Buffer buffer{memory.data(), bytes / element, o.dtype};
    comm::AllreduceOptions aopts;
    aopts.algorithm = o.algorithm;
    const cumulus::Algorithm ran = comm.resolve(o.algorithm, buffer.bytes());

    checkSum(comm, buffer, aopts, env.rank, p);
    const int iters = o.iters > 0 ? o.iters : itersFor(bytes);
    const int warmup = o.warmup >= 0 ? o.warmup : std::max(2, iters / 10);
    const double seconds = slowestSeconds(comm, buffer, aopts, iters, warmup);

    if (env.rank != 0) continue;
    const double algbw = static_cast<double>(buffer.bytes()) / seconds / 1e9;
    const double busbw = algbw * 2.0 * (p - 1) / p;
    const double model = copts.cost_model.predict(ran, static_cast<double>(buffer.bytes()),
                                                  comm.topology(), funnel != nullptr);
    std::printf("  %10zu %11zu %8s %6s %7d %11.1f %11.3f %11.3f %10.1f\n", buffer.bytes(),
                buffer.count, comm::dtypeName(o.dtype), cumulus::algorithmName(ran), iters,
                seconds * 1e6, algbw, busbw, model * 1e6);
    std::fflush(stdout);
    rows.push_back(jsonRow({o.algorithm, ran, p, buffer, iters, seconds, algbw, busbw, model,
                            p > 1 ? comm.transportTo(1) : "self"}));
  }
  if (env.rank == 0) {
    for (const auto& line : rows) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

}  // namespace cumulus::bench
