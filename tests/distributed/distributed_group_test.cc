// GroupConnection's environment parsing and errors, and the Chrome trace recorder.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "base/host_port.h"
#include "comm/cost_model.h"
#include "comm/error.h"
#include "comm/memory_store.h"
#include "comm/net/socket.h"
#include "distributed/group_connection.h"
#include "distributed/trace.h"

namespace cumulus::distributed {
namespace {

using ::testing::HasSubstr;

std::function<const char*(const char*)> lookup(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

const std::map<std::string, std::string> kLauncherEnv = {{"RANK", "1"},
                                                         {"WORLD_SIZE", "2"},
                                                         {"LOCAL_RANK", "1"},
                                                         {"LOCAL_WORLD_SIZE", "2"},
                                                         {"MASTER_ADDR", "127.0.0.1"},
                                                         {"MASTER_PORT", "29500"},
                                                         {"CUMULUS_GENERATION", "3"},
                                                         {"CUMULUS_JOB_TOKEN", "secret"},
                                                         {"CUMULUS_PS_ENDPOINT", "127.0.0.1:4000"},
                                                         {"CUMULUS_LOG_DIR", "/tmp/logs"}};

std::string errorOf(const std::map<std::string, std::string>& vars) {
  try {
    groupEnvironment(lookup(vars));
  } catch (const GroupError& e) {
    return e.what();
  }
  return "no error";
}

TEST(GroupEnvironmentTest, ReadsTheLauncherEnvironment) {
  const base::RunEnv env = groupEnvironment(lookup(kLauncherEnv));
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.store_host, "127.0.0.1");
  EXPECT_EQ(env.store_port, 29500);
  EXPECT_EQ(env.generation, 3);
  EXPECT_EQ(env.job_token, "secret");
  EXPECT_EQ(env.ps_endpoint, "127.0.0.1:4000");
  EXPECT_EQ(env.log_dir, "/tmp/logs");
}

TEST(GroupEnvironmentTest, NamesTheVariableThatIsMissingOrWrong) {
  auto without = [](const std::string& name) {
    auto vars = kLauncherEnv;
    vars.erase(name);
    return vars;
  };
  auto with = [](const std::string& name, const std::string& value) {
    auto vars = kLauncherEnv;
    vars[name] = value;
    return vars;
  };
  EXPECT_THAT(errorOf(without("MASTER_PORT")), HasSubstr("MASTER_PORT is not set"));
  EXPECT_THAT(errorOf(without("RANK")), HasSubstr("RANK is not set"));
  EXPECT_EQ(errorOf(with("RANK", "2")), "RANK=2 must be in [0, WORLD_SIZE=2)");
  EXPECT_EQ(errorOf(with("WORLD_SIZE", "two")),
            "environment variable WORLD_SIZE=\"two\" is not an integer");
  EXPECT_EQ(errorOf(with("MASTER_PORT", "70000")), "MASTER_PORT=70000 must be in [1, 65535]");
  EXPECT_EQ(errorOf(with("CUMULUS_GENERATION", "-1")), "CUMULUS_GENERATION=-1 must be >= 0");
  // Optional ones may be absent.
  auto vars = without("CUMULUS_PS_ENDPOINT");
  vars.erase("CUMULUS_GENERATION");
  vars.erase("LOCAL_RANK");
  const base::RunEnv env = groupEnvironment(lookup(vars));
  EXPECT_EQ(env.generation, 0);
  EXPECT_EQ(env.ps_endpoint, "");
}

TEST(GroupEnvironmentTest, ParsesEndpoints) {
  EXPECT_EQ(parseEndpoint("10.0.0.1:80", "X"), std::make_pair(std::string("10.0.0.1"), 80));
  EXPECT_EQ(parseEndpoint("[::1]:9", "X"), std::make_pair(std::string("::1"), 9));
  EXPECT_THROW(parseEndpoint("nohost", "X"), GroupError);
  try {
    parseEndpoint("h:0", "CUMULUS_PS_ENDPOINT");
    FAIL();
  } catch (const GroupError& e) {
    EXPECT_STREQ(e.what(),
                 "CUMULUS_PS_ENDPOINT=\"h:0\": expected an integer in [1, 65535], got \"0\"");
  }
}

TEST(ProcessGroupTest, FunnelWithoutAParameterServerSaysWhatToDo) {
  comm::MemoryStore store;
  base::RunEnv env;
  GroupOptions config;
  config.algorithm = Algorithm::kFunnel;
  try {
    GroupConnection group(env, config, store);
    FAIL();
  } catch (const GroupError& e) {
    EXPECT_THAT(
        e.what(),
        HasSubstr("the algorithm is funnel (comm.algorithm) but CUMULUS_PS_ENDPOINT is not set"));
  }
}

TEST(ProcessGroupTest, AnUnreachableStoreIsNamed) {
  // A port nobody listens on: bind an ephemeral one and close it again.
  int port = 0;
  {
    comm::net::Socket probe = comm::net::Socket::listen("127.0.0.1");
    const auto endpoint = base::parseHostPort(probe.localAddress());
    ASSERT_TRUE(endpoint);
    port = endpoint->port;
  }
  base::RunEnv env;
  env.world_size = 2;
  env.store_host = "127.0.0.1";
  env.store_port = port;
  GroupOptions config;
  config.timeout_seconds = 0.5;
  try {
    GroupConnection group(env, config);
    FAIL();
  } catch (const cumulus::CommError& e) {
    EXPECT_EQ(e.kind(), comm::ErrorKind::kStore) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port) + " unreachable"));
  }
}

TEST(ProcessGroupTest, ASingleRankGroupReducesToItself) {
  comm::MemoryStore store;
  base::RunEnv env;
  GroupOptions config;
  config.algorithm = Algorithm::kRing;
  GroupConnection group(env, config, store);
  EXPECT_EQ(group.world(), 1);
  EXPECT_EQ(group.algorithm(), cumulus::Algorithm::kRing);
  EXPECT_EQ(group.timeout(), std::chrono::milliseconds(60000));
  float value = 2.5f;
  comm::Buffer buffer{&value, 1, comm::DType::kFloat32};
  group.communicator().allreduce(buffer);
  EXPECT_EQ(value, 2.5f);
}

TEST(ProcessGroupTest, ACostModelIsReadOnceByTheGroupThatLoadsIt) {
  GroupOptions config;
  config.cost_model = ::testing::TempDir() + "/no_such_cost_model.json";
  const std::string named = "cost_model: cost model file '" + config.cost_model + "'";
  try {
    costModelOf(config);
    FAIL();
  } catch (const GroupError& e) {
    EXPECT_THAT(e.what(), HasSubstr(named));
  }
  comm::MemoryStore store;
  try {
    GroupConnection group(base::RunEnv{}, config, store);
    FAIL();
  } catch (const GroupError& e) {
    EXPECT_THAT(e.what(), HasSubstr(named));
  }
  // A connection given the group's loaded model reads no file: an elastic group re-connects at
  // every re-forming, when the file may be gone.
  GroupConnection group(base::RunEnv{}, config, store, comm::CostModel(10e-6, 0.25e-9, 0.1e-9));
  EXPECT_EQ(group.world(), 1);
  EXPECT_EQ(costModelOf(GroupOptions{}).alpha(), comm::CostModel().alpha());
}

TEST(TraceRecorderTest, WritesCompleteEventsWithRankAsPid) {
  TraceRecorder trace(3);
  const auto t0 = TraceRecorder::Clock::now();
  trace.record("backward \"fc\"", TraceRecorder::kComputeTid, t0,
               t0 + std::chrono::microseconds(250));
  trace.record("allreduce bucket 0", TraceRecorder::kCommTid, t0,
               t0 + std::chrono::microseconds(40), {{"bytes", 1024}});
  const std::string json = trace.json();
  EXPECT_THAT(json, HasSubstr("{\"traceEvents\":["));
  EXPECT_THAT(json, HasSubstr("\"ph\":\"X\",\"pid\":3,\"tid\":0,"));
  EXPECT_THAT(json, HasSubstr("\"dur\":250,\"name\":\"backward \\\"fc\\\"\"}"));
  EXPECT_THAT(json,
              HasSubstr("\"dur\":40,\"name\":\"allreduce bucket 0\",\"args\":{\"bytes\":1024}}"));
  EXPECT_THAT(json, HasSubstr("\"args\":{\"name\":\"rank 3\"}"));
}

TEST(TraceRecorderTest, IsThreadSafeAndBounded) {
  TraceRecorder trace(0, 1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        TraceRecorder::Span span(&trace, "span", t);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(trace.size(), 1000u);
  EXPECT_EQ(trace.dropped(), 600u);
  TraceRecorder::Span off(nullptr, "tracing off");  // must not crash
}

}  // namespace
}  // namespace cumulus::distributed
