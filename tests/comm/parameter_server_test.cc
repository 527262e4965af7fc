// The funnel end to end: ParameterServer + FunnelClient ranks as threads on loopback, and the
// cumulus-ps binary as a separate process.

#include "comm/parameter_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <future>
#include <random>
#include <thread>

#include "base/exec_env.h"
#include "comm/error.h"
#include "comm/funnel.h"
#include "comm/parameter_server_service.h"
#include "comm/reduce.h"
#include "tests/comm/rpc_test_util.h"

namespace cumulus::comm {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
constexpr char kServerToken[] = "ps-token";

// Writes `value` (a small integer or an exact quotient) as element i of dtype.
void put(DType dtype, void* data, size_t i, double value) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(data)[i] = static_cast<float>(value);
      break;
    case DType::kFloat64:
      static_cast<double*>(data)[i] = value;
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = floatToBf16(static_cast<float>(value));
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(data)[i] = rpctest::exactHalf(static_cast<float>(value));
      break;
    case DType::kInt32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(value);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(value);
      break;
  }
}

double get(DType dtype, const void* data, size_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DType::kFloat64:
      return static_cast<const double*>(data)[i];
    case DType::kBFloat16:
      return bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kFloat16:
      return rpctest::halfValue(static_cast<const uint16_t*>(data)[i]);
    case DType::kInt32:
      return static_cast<const int32_t*>(data)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(data)[i]);
  }
  return 0;
}

bool isInteger(DType dtype) { return dtype == DType::kInt32 || dtype == DType::kInt64; }

// The known answer at index i for inputs rpctest::inputValue(rank, i).
double expected(DType dtype, ReduceOp op, int world, size_t i) {
  int sum = 0, max = -100, min = 100;
  for (int r = 0; r < world; ++r) {
    const int v = rpctest::inputValue(r, i);
    sum += v;
    max = std::max(max, v);
    min = std::min(min, v);
  }
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kMax:
      return max;
    case ReduceOp::kMin:
      return min;
    case ReduceOp::kAvg:
      if (isInteger(dtype)) return sum / world;  // truncates toward zero (comm/reduce.h)
      if (dtype == DType::kFloat32) return static_cast<float>(sum) / static_cast<float>(world);
      return static_cast<double>(sum) / world;  // exact for the 16-bit types at world = 4
    case ReduceOp::kProduct:
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      break;  // not asked of this helper (ParameterServerTest.ProductAndBitwiseOps)
  }
  return 0;
}

// All ranks all-reduce `count` elements of `dtype` with `op` through `server`; checks every
// element of every rank against the known answer and reports the first mismatch.
void checkAllreduce(ParameterServer& server, int world, size_t count, DType dtype, ReduceOp op,
                    uint64_t seq) {
  SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + reduceOpName(op) + " world " +
               std::to_string(world) + " count " + std::to_string(count));
  std::vector<std::vector<char>> buffers(world, std::vector<char>(count * elementSize(dtype) + 1));
  auto errors = rpctest::runRanks(world, [&](int rank) {
    Buffer buffer{buffers[rank].data(), count, dtype};
    for (size_t i = 0; i < count; ++i) put(dtype, buffer.data, i, rpctest::inputValue(rank, i));
    FunnelClient client("", server.port(), kServerToken, rank, world);
    client.allreduce(buffer, op, seq, 20s);
  });
  rpctest::expectNoErrors(errors);
  for (int rank = 0; rank < world; ++rank)
    for (size_t i = 0; i < count; ++i) {
      const double want = expected(dtype, op, world, i), got = get(dtype, buffers[rank].data(), i);
      if (want != got) {
        ADD_FAILURE() << "rank " << rank << " index " << i << ": got " << got << ", want " << want;
        return;
      }
    }
}

class FunnelWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(FunnelWorldTest, EveryCountMatchesTheKnownAnswer) {
  const int world = GetParam();
  ParameterServer server("", 0, kServerToken, world);
  // Each count also takes another dtype/op, so every dtype meets every world size.
  const std::pair<DType, ReduceOp> kinds[] = {
      {DType::kFloat32, ReduceOp::kSum}, {DType::kInt32, ReduceOp::kAvg},
      {DType::kFloat64, ReduceOp::kMax}, {DType::kBFloat16, ReduceOp::kSum},
      {DType::kInt64, ReduceOp::kMin},   {DType::kFloat16, ReduceOp::kSum}};
  const size_t counts[] = {0, 1, 7, static_cast<size_t>(world - 1), 4097, (1u << 20) + 3};
  uint64_t seq = 0;
  for (size_t c = 0; c < 6; ++c) {
    const auto [dtype, op] = kinds[(c + world) % 6];
    checkAllreduce(server, world, counts[c], dtype, op, seq++);
  }
  // The largest count once more in float32 sum: 4 MiB + 12 bytes spans two pieces.
  checkAllreduce(server, world, (1u << 20) + 3, DType::kFloat32, ReduceOp::kSum, seq++);
}

INSTANTIATE_TEST_SUITE_P(Worlds, FunnelWorldTest, ::testing::Values(1, 2, 3, 4, 5, 8));

TEST(ParameterServerTest, EveryDTypeAndOpAcrossAPieceBoundary) {
  constexpr int kWorld = 4;  // a power of two: avg is exact in every dtype
  ParameterServer server("", 0, kServerToken, kWorld);
  uint64_t seq = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                      DType::kInt32, DType::kInt64})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      const size_t count = ParameterServer::kChunkBytes / elementSize(dtype) + 5;
      checkAllreduce(server, kWorld, op == ReduceOp::kSum ? count : 4097, dtype, op, seq++);
    }
}

// The product and the bitwise ops through the server, and a bitwise op on floats refused by it
// (a client that skipped the communicator's own check).
TEST(ParameterServerTest, ProductAndBitwiseOps) {
  constexpr int kWorld = 3;
  ParameterServer server("", 0, kServerToken, kWorld);
  uint64_t seq = 0;
  for (ReduceOp op : {ReduceOp::kProduct, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
    std::vector<std::vector<int64_t>> values(kWorld, std::vector<int64_t>(5));
    auto errors = rpctest::runRanks(kWorld, [&](int rank) {
      for (size_t i = 0; i < 5; ++i) values[rank][i] = static_cast<int64_t>(i + 3 * rank + 1);
      Buffer buffer{values[rank].data(), 5, DType::kInt64};
      FunnelClient client("", server.port(), kServerToken, rank, kWorld);
      client.allreduce(buffer, op, seq, 20s);
    });
    ++seq;
    rpctest::expectNoErrors(errors);
    for (size_t i = 0; i < 5; ++i) {
      const int64_t a = static_cast<int64_t>(i + 1), b = a + 3, c = a + 6;
      const int64_t want = op == ReduceOp::kProduct ? a * b * c
                           : op == ReduceOp::kBand  ? (a & b & c)
                           : op == ReduceOp::kBor   ? (a | b | c)
                                                    : (a ^ b ^ c);
      for (int rank = 0; rank < kWorld; ++rank)
        EXPECT_EQ(values[rank][i], want) << reduceOpName(op) << " rank " << rank << " at " << i;
    }
  }
  float x = 1.0f;
  Buffer floats{&x, 1, DType::kFloat32};
  FunnelClient client("", server.port(), kServerToken, 0, kWorld);
  try {
    client.allreduce(floats, ReduceOp::kBand, seq, 20s);
    ADD_FAILURE() << "band of float32 accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("sent an op its dtype does not take: the bitwise op band "
                                         "needs an integer dtype (int32 or int64), not float32"),
              std::string::npos)
        << e.what();
  }
}

// Rounding makes float sums order-dependent, so random floats expose any arrival-order summation.
TEST(ParameterServerTest, ResultIsTheRankOrderSumBitForBitWhateverTheArrivalOrder) {
  constexpr int kWorld = 5;
  constexpr size_t kCount = (1u << 20) + 3;
  ParameterServer server("", 0, kServerToken, kWorld);
  std::vector<std::vector<float>> inputs(kWorld, std::vector<float>(kCount));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (auto& input : inputs)
    for (float& x : input) x = dist(rng) * std::pow(10.0f, static_cast<float>(rng() % 7) - 3.0f);
  std::vector<float> reference = inputs[0];
  for (int r = 1; r < kWorld; ++r)
    for (size_t i = 0; i < kCount; ++i) reference[i] = reference[i] + inputs[r][i];

  for (int run = 0; run < 3; ++run) {
    std::vector<std::vector<float>> buffers = inputs;
    auto errors = rpctest::runRanks(kWorld, [&](int rank) {
      // Run 1: rank 0 comes last; run 2: reverse rank order. A rank starts once the server
      // holds the whole buffers of the ranks that come before it.
      std::vector<int> before;
      if (run == 1 && rank == 0) before = {1, 2, 3, 4};
      if (run == 2)
        for (int r = rank + 1; r < kWorld; ++r) before.push_back(r);
      if (!before.empty()) {
        ASSERT_TRUE(rpctest::waitUntil([&] { return server.progress(0, run).pushed == before; }))
            << "run " << run << " rank " << rank;
      }
      Buffer buffer{buffers[rank].data(), kCount, DType::kFloat32};
      FunnelClient("", server.port(), kServerToken, rank, kWorld)
          .allreduce(buffer, ReduceOp::kSum, run, 20s);
    });
    rpctest::expectNoErrors(errors);
    for (int rank = 0; rank < kWorld; ++rank)
      ASSERT_EQ(0, std::memcmp(buffers[rank].data(), reference.data(), kCount * sizeof(float)))
          << "run " << run << " rank " << rank << " differs from the rank-order sum";
  }
}

// A PushPull stream in memory: Read() hands out `pushes`, then reports the end of the stream, after
// first announcing it (`reached_end`) and waiting for `release` when `hold_at_end`.
class ScriptedStream : public PushPullStream {
 public:
  std::deque<proto::PushChunk> pushes;
  bool hold_at_end = false;
  std::promise<void> reached_end;
  std::promise<void> release;
  std::string pulled;  // what the server wrote back

  void SendInitialMetadata() override {}
  bool Write(const proto::PullChunk& chunk, grpc::WriteOptions) override {
    pulled += chunk.data();
    return true;
  }
  bool NextMessageSize(uint32_t* size) override {
    *size = pushes.empty() ? 0 : static_cast<uint32_t>(pushes.front().ByteSizeLong());
    return !pushes.empty();
  }
  bool Read(proto::PushChunk* chunk) override {
    if (pushes.empty()) {
      if (hold_at_end) {
        reached_end.set_value();
        release.get_future().wait();
      }
      return false;
    }
    *chunk = std::move(pushes.front());
    pushes.pop_front();
    return true;
  }
};

// Found by tests/fuzz/parameter_server_fuzz.cc (its crashing input was a third rank claiming an
// earlier rank's number): a rank that pushes a second header for a step still in progress fails
// the step for everyone, and the server did so through a reference to the step's map entry that
// failing erases (heap-use-after-free under ASan). Rank 0 pushes the first of its two pieces and
// stays in the call; a second "rank 0" then joins the same step.
TEST(ParameterServerTest, ARankThatPushesTwiceFailsTheStepForBothCalls) {
  std::unique_ptr<PushPullHandler> service = makeParameterServerService("", 2);
  proto::PushHeader header;
  header.set_generation(1);
  header.set_seq(1);
  header.set_rank(0);
  header.set_world(2);
  header.set_dtype(static_cast<uint32_t>(DType::kFloat32));
  header.set_op(static_cast<uint32_t>(ReduceOp::kSum));
  header.set_count(ParameterServer::kChunkBytes / sizeof(float) + 1);  // two pieces
  header.set_timeout_ms(60000);

  ScriptedStream first;
  first.pushes.emplace_back();
  *first.pushes.back().mutable_header() = header;
  first.pushes.back().set_data(std::string(ParameterServer::kChunkBytes, '\0'));
  first.hold_at_end = true;
  std::future<void> first_in_step = first.reached_end.get_future();
  grpc::Status first_status;
  std::thread first_rank([&] {
    grpc::ServerContext context;
    first_status = service->pushPull(context, first);
  });
  first_in_step.wait();

  ScriptedStream second;
  second.pushes.emplace_back();
  *second.pushes.back().mutable_header() = header;
  grpc::ServerContext context;
  const grpc::Status second_status = service->pushPull(context, second);
  first.release.set_value();
  first_rank.join();

  const std::string why = "generation 1 seq 1: rank 0 pushed twice";
  EXPECT_EQ(second_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(second_status.error_message(), why);
  EXPECT_EQ(first_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(first_status.error_message(), why);
}

// Found by tests/fuzz/parameter_server_fuzz.cc: timeout_ms = 2^62 overflowed the clock arithmetic
// (undefined; in practice the deadline became "now", so the first rank to arrive failed at once).
TEST(ParameterServerTest, AnAstronomicalTimeoutWaitsForTheOtherRank) {
  std::unique_ptr<PushPullHandler> service = makeParameterServerService("", 2);
  ScriptedStream streams[2];
  for (int rank = 0; rank < 2; ++rank) {
    proto::PushHeader header;
    header.set_generation(1);
    header.set_seq(1);
    header.set_rank(rank);
    header.set_world(2);
    header.set_dtype(static_cast<uint32_t>(DType::kInt64));
    header.set_op(static_cast<uint32_t>(ReduceOp::kSum));
    header.set_count(1);
    header.set_timeout_ms(uint64_t{1} << 62);
    const int64_t value = 20 + rank;
    streams[rank].pushes.emplace_back();
    *streams[rank].pushes.back().mutable_header() = header;
    streams[rank].pushes.back().set_data(std::string(reinterpret_cast<const char*>(&value), 8));
  }
  grpc::Status statuses[2];
  std::thread rank0([&] {
    grpc::ServerContext context;
    statuses[0] = service->pushPull(context, streams[0]);
  });
  grpc::ServerContext context;
  statuses[1] = service->pushPull(context, streams[1]);
  rank0.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank].error_message();
    int64_t sum = 0;
    ASSERT_EQ(streams[rank].pulled.size(), sizeof sum);
    std::memcpy(&sum, streams[rank].pulled.data(), sizeof sum);
    EXPECT_EQ(sum, 41);
  }
}

TEST(ParameterServerTest, CumulusPsBinaryServesAndStopsOnSigterm) {
  const std::string binary = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-ps";
  ASSERT_EQ(access(binary.c_str(), X_OK), 0) << binary << " is missing: build cumulus-ps";
  // Built before fork(): this process runs gRPC threads, so the child may not allocate.
  cumulus::base::ExecArgs exec(
      {binary, "--world-size", "3", "--port", "0", "--token-env", "CUMULUS_TEST_PS_TOKEN"},
      {{"CUMULUS_TEST_PS_TOKEN", kServerToken}});
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execve(exec.program(), exec.argv(), exec.envp());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  close(out[0]);
  const std::string prefix = "cumulus-ps listening on 127.0.0.1:";
  int port = 0;
  if (line.rfind(prefix, 0) == 0) port = std::atoi(line.c_str() + prefix.size());
  EXPECT_GT(port, 0) << "first line was '" << line << "'";

  if (port > 0) {
    constexpr size_t kCount = 3000;
    std::vector<std::vector<int64_t>> data(3, std::vector<int64_t>(kCount));
    auto errors = rpctest::runRanks(3, [&](int rank) {
      for (size_t i = 0; i < kCount; ++i) data[rank][i] = static_cast<int64_t>(i) * (rank + 1);
      Buffer buffer{data[rank].data(), kCount, DType::kInt64};
      FunnelClient("127.0.0.1", port, kServerToken, rank, 3)
          .allreduce(buffer, ReduceOp::kSum, 0, 10s);
    });
    rpctest::expectNoErrors(errors);
    for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(data[rank][kCount - 1], 2999 * 6);
  }

  kill(pid, SIGTERM);
  // Wait for the exit itself (a blocking waitpid on a helper thread), up to 5 s; past that,
  // SIGKILL ends the process and so the wait.
  int status = 0;
  std::future<pid_t> exited =
      std::async(std::launch::async, [&] { return waitpid(pid, &status, 0); });
  if (exited.wait_for(5s) != std::future_status::ready) {
    kill(pid, SIGKILL);
    exited.get();
    FAIL() << "cumulus-ps did not exit within 5 s of SIGTERM";
  }
  ASSERT_EQ(exited.get(), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// As every Cumulus binary (base/command_line.h): a usage mistake exits 2 naming the flag, --help
// prints on stdout and exits 0.
TEST(ParameterServerTest, CumulusPsRejectsBadFlagsWithExitTwoAndHelpsWithExitZero) {
  const std::string binary = std::string(CUMULUS_BINARY_DIR) + "/bin/cumulus-ps";
  auto run = [&](const std::string& args, int* code) {
    FILE* pipe = popen((binary + " " + args).c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::string output;
    char chunk[256];
    while (size_t n = fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
    const int status = pclose(pipe);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return output;
  };
  int code = -1;
  EXPECT_EQ(run("--port 0 2>&1", &code), "cumulus-ps: error: --world-size is required\n");
  EXPECT_EQ(code, 2);
  EXPECT_EQ(run("--world-size 2x 2>&1", &code),
            "cumulus-ps: error: --world-size: expected an integer in [1, 65536], got \"2x\"\n");
  EXPECT_EQ(code, 2);
  const std::string help = run("--help 2>/dev/null", &code);
  EXPECT_EQ(code, 0);
  EXPECT_THAT(help, HasSubstr("Usage: cumulus-ps [FLAGS]"));
  EXPECT_THAT(help,
              HasSubstr("  --world-size N REQUIRED     number of workers that push each step"));
}

}  // namespace
}  // namespace cumulus::comm
