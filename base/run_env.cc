#include "base/run_env.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <utility>

#include "base/env_names.h"
#include "base/host_port.h"
#include "base/integer.h"

namespace cumulus::base {
namespace {

int64_t readInt(const EnvLookup& getenv, const char* name, int64_t fallback) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  const std::optional<int64_t> value = parseInteger(text);
  if (!value) {
    throw EnvError(std::string("environment variable ") + name + "=\"" + text +
                   "\" is not an integer");
  }
  return *value;
}

std::string readString(const EnvLookup& getenv, const char* name) {
  const char* text = getenv(name);
  return text == nullptr ? std::string() : std::string(text);
}

void require(bool ok, const std::string& message) {
  if (!ok) throw EnvError(message);
}

}  // namespace

const char* systemEnvironment(const char* name) { return std::getenv(name); }

const char* memberEnvironment(const char* name) {
  const std::string n = name;
  for (const char* job :
       {env::kRank, env::kWorldSize, env::kGroupRank, env::kLocalRank, env::kLocalWorldSize}) {
    if (n == job) return nullptr;
  }
  return std::getenv(name);
}

RunEnv RunEnv::fromGroupEnvironment(const EnvLookup& getenv, const std::string& hint) {
  const char* store = getenv(env::kStore);
  const bool has_store = store != nullptr && *store != '\0';
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    if (has_store && std::string(name).rfind("MASTER_", 0) == 0) continue;
    const char* text = getenv(name);
    require(text != nullptr && *text != '\0', std::string(name) + " is not set: " + hint);
  }
  return read(getenv, /*minPort=*/1);
}

DataPlaneEnv DataPlaneEnv::fromEnvironment(const EnvLookup& getenv) {
  DataPlaneEnv out;
  if (const char* text = getenv(env::kTransport); text != nullptr && *text != '\0') {
    out.transport = text;
  }
  if (const char* text = getenv(env::kSpinMicroseconds); text != nullptr && *text != '\0') {
    out.spin_microseconds = parseInteger(text, 0, 1000000);
    if (!out.spin_microseconds) {
      throw EnvError(std::string(env::kSpinMicroseconds) +
                     " (microseconds): " + integerProblem(text, 0, 1000000));
    }
  }
  return out;
}

RunEnv RunEnv::fromEnvironment(const EnvLookup& getenv) { return read(getenv, /*minPort=*/0); }

// MASTER_PORT must be in [minPort, 65535]: 0 means "none" only for a process that may run alone.
RunEnv RunEnv::read(const EnvLookup& getenv, int64_t minPort) {
  // RANK and WORLD_SIZE come as a pair. Only one of them is a worker meant for a group that was
  // started wrongly: training it alone would exit 0 with a model nobody asked for.
  const auto isSet = [&](const char* name) {
    const char* text = getenv(name);
    return text != nullptr && *text != '\0';
  };
  for (const auto& [have, missing] : {std::pair{"RANK", "WORLD_SIZE"}, {"WORLD_SIZE", "RANK"}}) {
    if (isSet(have) && !isSet(missing)) {
      throw EnvError(std::string(have) + "=" + getenv(have) + " is set but " + missing +
                     " is not: a worker of a group needs both (cumulus-run sets them); unset " +
                     have + " to train alone");
    }
  }
  RunEnv env;
  env.world_size = readInt(getenv, env::kWorldSize, 1);
  env.rank = readInt(getenv, env::kRank, 0);
  env.local_world_size = readInt(getenv, env::kLocalWorldSize, 1);
  env.local_rank = readInt(getenv, env::kLocalRank, 0);
  env.group_rank = readInt(getenv, env::kGroupRank, 0);
  if (const char* store = getenv(env::kStore); store != nullptr && *store != '\0') {
    std::string problem;
    const std::optional<HostPort> endpoint = parseHostPort(store, &problem);
    if (!endpoint) throw EnvError(std::string(env::kStore) + "=\"" + store + "\": " + problem);
    env.store_host = endpoint->host;
    env.store_port = endpoint->port;
  } else {
    env.store_host = readString(getenv, env::kMasterAddr);
    env.store_port = readInt(getenv, env::kMasterPort, 0);
  }
  env.run_id = readString(getenv, env::kRunId);
  env.restart_count = readInt(getenv, env::kRestartCount, 0);
  env.generation = readInt(getenv, env::kGeneration, 0);
  // Under torchrun, a restarted group meets again through the store of the first attempt, where
  // the first attempt's addresses still are: its own generation keeps them apart.
  const char* generation = getenv(env::kGeneration);
  if (generation == nullptr || *generation == '\0') {
    const int64_t restarts = readInt(getenv, env::kTorchelasticRestartCount, 0);
    require(restarts >= 0, std::string(env::kTorchelasticRestartCount) + "=" +
                               std::to_string(restarts) + " must be >= 0");
    env.generation = restarts;
    if (readString(getenv, env::kRestartCount).empty()) env.restart_count = restarts;
  }
  env.job_token = readString(getenv, env::kJobToken);
  env.ps_endpoint = readString(getenv, env::kPsEndpoint);
  env.log_dir = readString(getenv, env::kLogDir);
  env.bind_host = readString(getenv, env::kBindHost);
  env.live_metrics = readString(getenv, env::kLiveMetrics) == "1";

  // Ranks and sizes are ints everywhere past this reader.
  require(env.world_size >= 1 && env.world_size <= INT32_MAX,
          "WORLD_SIZE=" + std::to_string(env.world_size) + " must be in [1, 2147483647]");
  require(env.rank >= 0 && env.rank < env.world_size,
          "RANK=" + std::to_string(env.rank) +
              " must be in [0, WORLD_SIZE=" + std::to_string(env.world_size) + ")");
  require(
      env.local_world_size >= 1 && env.local_world_size <= INT32_MAX,
      "LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size) + " must be in [1, 2147483647]");
  require(env.local_rank >= 0 && env.local_rank < env.local_world_size,
          "LOCAL_RANK=" + std::to_string(env.local_rank) +
              " must be in [0, LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size) + ")");
  require(env.store_port >= minPort && env.store_port <= 65535,
          std::string(env::kMasterPort) + "=" + std::to_string(env.store_port) + " must be in [" +
              std::to_string(minPort) + ", 65535]");
  require(env.restart_count >= 0,
          "CUMULUS_RESTART_COUNT=" + std::to_string(env.restart_count) + " must be >= 0");
  require(env.generation >= 0,
          "CUMULUS_GENERATION=" + std::to_string(env.generation) + " must be >= 0");
  return env;
}

}  // namespace cumulus::base
