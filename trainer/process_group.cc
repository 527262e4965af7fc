#include "trainer/process_group.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <optional>
#include <utility>

#include "base/host_port.h"
#include "comm/cost_model.h"
#include "comm/funnel.h"
#include "comm/store_client.h"

namespace cumulus::trainer {
namespace {

int64_t parseInteger(const char* name, const char* value) {
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  if (*value == '\0' || *end != '\0' || errno == ERANGE || parsed < INT_MIN || parsed > INT_MAX) {
    throw GroupError(std::string(name) + "=\"" + value + "\" is not an integer");
  }
  return parsed;
}

}  // namespace

GroupEnv GroupEnv::fromEnvironment(const std::function<const char*(const char*)>& getenv) {
  auto required = [&](const char* name) -> std::string {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') {
      throw GroupError(std::string(name) +
                       " is not set: a worker of a group needs RANK, WORLD_SIZE, MASTER_ADDR and "
                       "MASTER_PORT (start it with cumulus-run)");
    }
    return value;
  };
  auto optional = [&](const char* name) -> std::string {
    const char* value = getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  GroupEnv env;
  env.rank = static_cast<int>(parseInteger("RANK", required("RANK").c_str()));
  env.world_size = static_cast<int>(parseInteger("WORLD_SIZE", required("WORLD_SIZE").c_str()));
  env.master_addr = required("MASTER_ADDR");
  env.master_port = static_cast<int>(parseInteger("MASTER_PORT", required("MASTER_PORT").c_str()));
  if (const std::string v = optional("LOCAL_RANK"); !v.empty()) {
    env.local_rank = static_cast<int>(parseInteger("LOCAL_RANK", v.c_str()));
  }
  if (const std::string v = optional("CUMULUS_GENERATION"); !v.empty()) {
    const int64_t g = parseInteger("CUMULUS_GENERATION", v.c_str());
    if (g < 0) throw GroupError("CUMULUS_GENERATION=" + v + " is negative");
    env.generation = static_cast<uint64_t>(g);
  }
  env.job_token = optional("CUMULUS_JOB_TOKEN");
  env.ps_endpoint = optional("CUMULUS_PS_ENDPOINT");
  env.log_dir = optional("CUMULUS_LOG_DIR");
  env.bind_host = optional("CUMULUS_BIND_HOST");
  if (env.world_size < 1) {
    throw GroupError("WORLD_SIZE=" + std::to_string(env.world_size) + " must be >= 1");
  }
  if (env.rank < 0 || env.rank >= env.world_size) {
    throw GroupError("RANK=" + std::to_string(env.rank) +
                     " is outside [0, WORLD_SIZE=" + std::to_string(env.world_size) + ")");
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    throw GroupError("MASTER_PORT=" + std::to_string(env.master_port) +
                     " is not a TCP port (1-65535)");
  }
  return env;
}

std::pair<std::string, int> parseEndpoint(const std::string& endpoint, const std::string& what) {
  std::string problem;
  std::optional<base::HostPort> parsed = base::parseHostPort(endpoint, &problem);
  if (!parsed) throw GroupError(what + "=\"" + endpoint + "\": " + problem);
  return {std::move(parsed->host), parsed->port};
}

ProcessGroup::ProcessGroup(const GroupEnv& env, const configs::CommConfig& config)
    : env_(env), config_(config) {
  comm::StoreClientOptions options;
  options.connect_timeout = timeoutOf(config);
  store_ =
      std::make_unique<comm::StoreClient>(env.master_addr, env.master_port, env.job_token, options);
  connect(*store_);
}

ProcessGroup::ProcessGroup(const GroupEnv& env, const configs::CommConfig& config,
                           comm::Store& store)
    : env_(env), config_(config) {
  connect(store);
}

ProcessGroup::~ProcessGroup() {
  // The communicator may still call the funnel client from its worker thread: stop it first.
  communicator_.reset();
  funnel_.reset();
}

std::chrono::milliseconds ProcessGroup::timeoutOf(const configs::CommConfig& config) {
  if (!(config.timeout_seconds > 0) || !std::isfinite(config.timeout_seconds)) {
    throw GroupError("comm.timeout_seconds: must be a positive number of seconds, got " +
                     std::to_string(config.timeout_seconds));
  }
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(config.timeout_seconds * 1000.0)));
}

void ProcessGroup::connect(comm::Store& store) {
  try {
    algorithm_ = comm::parseAlgorithm(config_.algorithm);
  } catch (const std::invalid_argument& e) {
    throw GroupError(std::string("comm.algorithm: ") + e.what());
  }
  timeout_ = timeoutOf(config_);

  comm::CommunicatorOptions options;
  options.generation = env_.generation;
  options.jobToken = env_.job_token;
  options.timeout = timeout_;
  if (!env_.bind_host.empty()) options.bindHost = env_.bind_host;
  if (!config_.cost_model.empty()) {
    try {
      options.costModel = comm::CostModel::load(config_.cost_model);
    } catch (const std::exception& e) {
      throw GroupError(std::string("comm.cost_model: ") + e.what());
    }
  }
  if (algorithm_ == comm::Algorithm::kFunnel) {
    if (env_.ps_endpoint.empty()) {
      throw GroupError(
          "comm.algorithm is funnel but CUMULUS_PS_ENDPOINT is not set: start the job with "
          "cumulus-run (which hosts the parameter server for funnel) or point "
          "CUMULUS_PS_ENDPOINT at a cumulus-ps host:port");
    }
    const auto [host, port] = parseEndpoint(env_.ps_endpoint, "CUMULUS_PS_ENDPOINT");
    funnel_ = std::make_unique<comm::FunnelClient>(host, port, env_.job_token, env_.rank,
                                                   env_.world_size, env_.generation);
    options.remoteReducer = funnel_.get();
  }
  communicator_ = std::make_unique<comm::Communicator>(env_.rank, env_.world_size, store, options);
}

}  // namespace cumulus::trainer
