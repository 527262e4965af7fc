// FunnelClient and ParameterServer failure paths: every failure reaches every rank of the step
// as a typed error, quickly, naming the rank to blame; the server forgets the failed step.

#include "comm/funnel.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm/memory_store.h"
#include "comm/parameter_server.h"
#include "proto/parameter_server.grpc.pb.h"
#include "tests/comm/rpc_test_util.h"

namespace cumulus::comm {
namespace {

using rpctest::commErrorOf;
using rpctest::seconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr char kFunnelToken[] = "funnel-token";

// Runs one all-reduce of `count` float32 ones per rank; returns what each rank threw.
std::vector<std::exception_ptr> runStep(int port, int world, uint64_t seq, size_t count,
                                        std::chrono::milliseconds timeout = 10s,
                                        uint64_t generation = 0) {
  return rpctest::runRanks(world, [&](int rank) {
    std::vector<float> data(count, 1.0f);
    Buffer buffer{data.data(), count, DType::kFloat32};
    FunnelClient("", port, kFunnelToken, rank, world, generation)
        .allreduce(buffer, ReduceOp::kSum, seq, timeout);
    for (size_t i = 0; i < count; ++i)
      if (data[i] != static_cast<float>(world))
        throw std::runtime_error("wrong sum at index " + std::to_string(i));
  });
}

TEST(FunnelTest, AWorkerThatDiesMidPushFailsTheOthersFastAndTheStepIsForgotten) {
  constexpr int kWorld = 3;
  const size_t count = 2 * ParameterServer::kChunkBytes / sizeof(float) + 10;  // three pieces
  ParameterServer server("", 0, kFunnelToken, kWorld);
  std::thread dying([&] {
    // Rank 2 by hand: the header and its first piece, then the stream is cancelled.
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                       grpc::InsecureChannelCredentials());
    auto stub = proto::ParameterServer::NewStub(channel);
    grpc::ClientContext context;
    context.AddMetadata("x-cumulus-token", kFunnelToken);
    auto stream = stub->PushPull(&context);
    proto::PushChunk message;
    auto* h = message.mutable_header();
    h->set_seq(0);
    h->set_rank(2);
    h->set_world(kWorld);
    h->set_dtype(static_cast<uint32_t>(DType::kFloat32));
    h->set_op(static_cast<uint32_t>(ReduceOp::kSum));
    h->set_count(count);
    h->set_timeout_ms(10000);
    message.set_data(std::string(ParameterServer::kChunkBytes, '\0'));
    stream->Write(message);
    // Die once the server holds this first piece (it came with the header) and ranks 0 and 1
    // have pushed everything and wait for the result.
    EXPECT_TRUE(rpctest::waitUntil([&] {
      const auto step = server.progress(0, 0);
      return step.joined.size() == 3 && step.pushed == std::vector<int>{0, 1};
    })) << "ranks 0 and 1 never finished their push";
    context.TryCancel();
    stream->Finish();
  });
  const auto start = Clock::now();
  auto errors = rpctest::runRanks(2, [&](int rank) {
    std::vector<float> data(count, 1.0f);
    Buffer buffer{data.data(), count, DType::kFloat32};
    FunnelClient("", server.port(), kFunnelToken, rank, kWorld)
        .allreduce(buffer, ReduceOp::kSum, 0, 10s);
  });
  dying.join();
  EXPECT_LT(seconds(Clock::now() - start), 3.0);
  for (const auto& error : errors) {
    const CommError e = commErrorOf(error);
    EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed);
    EXPECT_EQ(e.op(), "allreduce/funnel");
    EXPECT_EQ(e.seq(), 0u);
    EXPECT_EQ(e.peer(), 2);
    EXPECT_THAT(e.what(), HasSubstr("rank 2 disconnected mid-push after 4194304 of 8388648 bytes"));
  }
  // A late rank of the failed step gets the same error at once; the next step works.
  const auto late_start = Clock::now();
  auto late = rpctest::runRanks(1, [&](int) {
    std::vector<float> data(count, 1.0f);
    Buffer buffer{data.data(), count, DType::kFloat32};
    FunnelClient("", server.port(), kFunnelToken, 1, kWorld)
        .allreduce(buffer, ReduceOp::kSum, 0, 10s);
  });
  EXPECT_LT(seconds(Clock::now() - late_start), 2.0);
  EXPECT_THAT(commErrorOf(late[0]).what(), HasSubstr("rank 2 disconnected mid-push"));
  rpctest::expectNoErrors(runStep(server.port(), kWorld, 1, count));
}

TEST(FunnelTest, TimeoutNamesTheRanksThatNeverPushed) {
  ParameterServer server("", 0, kFunnelToken, 4);
  const auto start = Clock::now();
  auto errors = rpctest::runRanks(4, [&](int rank) {
    if (rank == 1 || rank == 3) return;  // never push
    std::vector<float> data(100, 1.0f);
    Buffer buffer{data.data(), data.size(), DType::kFloat32};
    FunnelClient("", server.port(), kFunnelToken, rank, 4)
        .allreduce(buffer, ReduceOp::kSum, 7, 400ms);
  });
  const double took = seconds(Clock::now() - start);
  EXPECT_GE(took, 0.35);
  EXPECT_LT(took, 2.0);
  for (int rank : {0, 2}) {
    const CommError e = commErrorOf(errors[rank]);
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_EQ(e.seq(), 7u);
    EXPECT_EQ(e.peer(), 1);
    EXPECT_THAT(e.what(),
                HasSubstr("generation 0 seq 7: rank(s) 1, 3 did not push before the timeout"));
  }
}

TEST(FunnelTest, CountMismatchFailsEveryRankNamingTheOddOne) {
  ParameterServer server("", 0, kFunnelToken, 3);
  auto errors = rpctest::runRanks(3, [&](int rank) {
    if (rank == 2) {  // ranks 0 and 1 set the reference
      ASSERT_TRUE(rpctest::waitUntil([&] { return server.progress(0, 3).joined.size() == 2; }));
    }
    std::vector<float> data(rank == 2 ? 101 : 100, 1.0f);
    Buffer buffer{data.data(), data.size(), DType::kFloat32};
    FunnelClient("", server.port(), kFunnelToken, rank, 3).allreduce(buffer, ReduceOp::kSum, 3, 5s);
  });
  for (const auto& error : errors) {
    const CommError e = commErrorOf(error);
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_EQ(e.peer(), 2);
    EXPECT_THAT(e.what(),
                HasSubstr("rank 2 sent world=3 dtype=float32 op=sum count=101 but rank "));
    EXPECT_THAT(e.what(), HasSubstr("count=100"));
  }
}

TEST(FunnelTest, DTypeMismatchFailsEveryRank) {
  ParameterServer server("", 0, kFunnelToken, 2);
  auto errors = rpctest::runRanks(2, [&](int rank) {
    if (rank == 1) {  // rank 0 sets the reference
      ASSERT_TRUE(rpctest::waitUntil([&] { return server.progress(0, 0).joined.size() == 1; }));
    }
    std::vector<double> data(10, 1.0);
    Buffer buffer{data.data(), rank == 1 ? 20u : 10u,
                  rank == 1 ? DType::kFloat32 : DType::kFloat64};
    FunnelClient("", server.port(), kFunnelToken, rank, 2).allreduce(buffer, ReduceOp::kMax, 0, 5s);
  });
  for (const auto& error : errors) {
    const CommError e = commErrorOf(error);
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_THAT(e.what(), HasSubstr("rank 1 sent world=2 dtype=float32 op=max count=20 but rank 0 "
                                    "sent world=2 dtype=float64 op=max count=10"));
  }
}

TEST(FunnelTest, WorldSizeDifferentFromTheServersIsRejected) {
  ParameterServer server("", 0, kFunnelToken, 2);
  std::vector<float> data(4, 1.0f);
  Buffer buffer{data.data(), 4, DType::kFloat32};
  try {
    FunnelClient("", server.port(), kFunnelToken, 0, 3).allreduce(buffer, ReduceOp::kSum, 0, 5s);
    FAIL() << "a push with the wrong world size returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalid);
    EXPECT_EQ(e.peer(), 0);
    EXPECT_THAT(e.what(), HasSubstr("rank 0 says world size 3 but the parameter server serves 2"));
  }
}

TEST(FunnelTest, StaleGenerationIsRejectedAndANewOneSupersedesOldSteps) {
  ParameterServer server("", 0, kFunnelToken, 2);
  rpctest::expectNoErrors(runStep(server.port(), 2, 0, 10, 5s, /*generation=*/5));
  std::vector<float> data(10, 1.0f);
  Buffer buffer{data.data(), 10, DType::kFloat32};
  try {
    FunnelClient("", server.port(), kFunnelToken, 0, 2, 4).allreduce(buffer, ReduceOp::kSum, 1, 5s);
    FAIL() << "a push from an older generation returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFrame);
    EXPECT_THAT(e.what(), HasSubstr("rank 0 pushed for stale generation 4; the parameter server "
                                    "is at generation 5"));
  }
  // Rank 0 of generation 5 waits for a partner that restarted into generation 6.
  const auto start = Clock::now();
  std::exception_ptr old_error;
  std::thread old_rank([&] {
    try {
      FunnelClient("", server.port(), kFunnelToken, 0, 2, 5)
          .allreduce(buffer, ReduceOp::kSum, 9, 10s);
    } catch (...) {
      old_error = std::current_exception();
    }
  });
  ASSERT_TRUE(rpctest::waitUntil([&] { return server.progress(5, 9).pushed.size() == 1; }));
  rpctest::expectNoErrors(runStep(server.port(), 2, 0, 10, 5s, /*generation=*/6));
  old_rank.join();
  EXPECT_LT(seconds(Clock::now() - start), 3.0);
  const CommError e = commErrorOf(old_error);
  EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed);
  EXPECT_THAT(e.what(), HasSubstr("generation 5 seq 9 superseded by generation 6"));
}

TEST(FunnelTest, WrongTokenIsUnauthorized) {
  ParameterServer server("", 0, kFunnelToken, 1);
  std::vector<float> data(4, 1.0f);
  Buffer buffer{data.data(), 4, DType::kFloat32};
  try {
    FunnelClient("", server.port(), "not-the-token", 0, 1).allreduce(buffer, ReduceOp::kSum, 0, 5s);
    FAIL() << "a push with a wrong token returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnauthorized);
    EXPECT_THAT(e.what(), HasSubstr("wrong job token"));
  }
  EXPECT_EQ(data[0], 1.0f);
}

TEST(FunnelTest, UnreachableServerTimesOutNamingIt) {
  int port;
  {
    ParameterServer gone("", 0, kFunnelToken, 1);
    port = gone.port();
  }
  std::vector<float> data(4, 1.0f);
  Buffer buffer{data.data(), 4, DType::kFloat32};
  const auto start = Clock::now();
  try {
    FunnelClient("", port, kFunnelToken, 0, 1).allreduce(buffer, ReduceOp::kSum, 0, 500ms);
    FAIL() << "a push to a closed port returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("parameter server 127.0.0.1:" + std::to_string(port) +
                                    " unreachable for 1."));
    EXPECT_THAT(e.what(), HasSubstr(" s (connection refused)"));
  }
  EXPECT_LT(seconds(Clock::now() - start), 2.5);
}

TEST(FunnelTest, ServerShutdownMidStepFailsTheWaitingRanks) {
  auto server = std::make_unique<ParameterServer>("", 0, kFunnelToken, 3);
  std::thread stopper([&] {
    // Stop once both ranks wait in the step for the third, which never comes.
    EXPECT_TRUE(rpctest::waitUntil([&] { return server->progress(0, 0).pushed.size() == 2; }));
    server->shutdown();
  });
  const auto start = Clock::now();
  auto errors = rpctest::runRanks(2, [&](int rank) {
    std::vector<float> data(1000, 1.0f);
    Buffer buffer{data.data(), data.size(), DType::kFloat32};
    FunnelClient("", server->port(), kFunnelToken, rank, 3)
        .allreduce(buffer, ReduceOp::kSum, 0, 20s);
  });
  stopper.join();
  EXPECT_LT(seconds(Clock::now() - start), 3.0);
  for (const auto& error : errors) {
    const CommError e = commErrorOf(error);
    EXPECT_EQ(e.kind(), ErrorKind::kPeerClosed);
    EXPECT_THAT(e.what(), HasSubstr("parameter server shutting down"));
  }
}

// The seam of comm/algorithm.h: a Communicator with Algorithm::kFunnel delegates to the
// FunnelClient, whose seq numbers advance with the communicator's, and counts the requests the
// client sent: each step's 40000 data bytes in one PushChunk, plus its few bytes of protobuf
// header and field tags.
TEST(FunnelTest, CommunicatorRunsTheFunnelThroughItsRemoteReducer) {
  constexpr int kWorld = 3;
  ParameterServer server("", 0, kFunnelToken, kWorld);
  MemoryStore store;
  auto errors = rpctest::runRanks(kWorld, [&](int rank) {
    FunnelClient funnel("", server.port(), kFunnelToken, rank, kWorld);
    CommunicatorOptions options;
    options.job_token = kFunnelToken;
    options.timeout = 10s;
    options.remote_reducer = &funnel;
    Communicator comm(rank, kWorld, store, options);
    for (int step = 0; step < 3; ++step) {
      std::vector<int64_t> data(5000, rank + step);
      Buffer buffer{data.data(), data.size(), DType::kInt64};
      AllreduceOptions reduce;
      reduce.algorithm = Algorithm::kFunnel;
      reduce.op = ReduceOp::kMax;
      comm.allreduce(buffer, reduce);
      for (int64_t v : data)
        if (v != kWorld - 1 + step) throw std::runtime_error("wrong max " + std::to_string(v));
    }
    const uint64_t payload = 3 * 5000 * sizeof(int64_t);
    if (comm.bytesSent() <= payload || comm.bytesSent() > payload + 3 * 64)
      throw std::runtime_error("sent " + std::to_string(comm.bytesSent()) + " bytes for " +
                               std::to_string(payload) + " bytes of data");
  });
  rpctest::expectNoErrors(errors);
}

}  // namespace
}  // namespace cumulus::comm
