#include "distributed/group_connection.h"

#include <cmath>
#include <optional>
#include <utility>

#include "base/host_port.h"
#include "base/run_env.h"
#include "comm/cost_model.h"
#include "comm/funnel.h"
#include "comm/store_client.h"

namespace cumulus::distributed {

base::RunEnv groupEnvironment(const base::EnvLookup& getenv) {
  try {
    return base::RunEnv::fromGroupEnvironment(
        getenv,
        "a worker of a group needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (start it with "
        "cumulus-run)");
  } catch (const base::EnvError& e) {
    throw GroupError(e.what());  // the group's callers handle GroupError; the text is base's
  }
}

std::pair<std::string, int> parseEndpoint(const std::string& endpoint, const std::string& what) {
  std::string problem;
  std::optional<base::HostPort> parsed = base::parseHostPort(endpoint, &problem);
  if (!parsed) throw GroupError(what + "=\"" + endpoint + "\": " + problem);
  return {std::move(parsed->host), parsed->port};
}

std::chrono::milliseconds timeoutOption(double seconds, const std::string& what) {
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw GroupError(what + ": must be a positive number of seconds, got " +
                     std::to_string(seconds));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

comm::CostModel costModelOf(const GroupOptions& options) {
  if (options.cost_model.empty()) return comm::CostModel();
  try {
    return comm::CostModel::load(options.cost_model);
  } catch (const std::exception& e) {
    throw GroupError(std::string("cost_model: ") + e.what());
  }
}

GroupConnection::GroupConnection(const base::RunEnv& env, const GroupOptions& options,
                                 std::optional<comm::CostModel> cost_model)
    : env_(env),
      options_(options),
      timeout_(timeoutOption(options.timeout_seconds, "timeout_seconds")) {
  comm::StoreClientOptions store_options;
  store_options.connect_timeout = timeout_;
  store_ = std::make_unique<comm::StoreClient>(env.store_host, static_cast<int>(env.store_port),
                                               env.job_token, store_options);
  connect(*store_, std::move(cost_model));
}

GroupConnection::GroupConnection(const base::RunEnv& env, const GroupOptions& options,
                                 comm::Store& store, std::optional<comm::CostModel> cost_model)
    : env_(env),
      options_(options),
      timeout_(timeoutOption(options.timeout_seconds, "timeout_seconds")) {
  connect(store, std::move(cost_model));
}

GroupConnection::~GroupConnection() {
  // The communicator may still call the funnel client from its worker thread: stop it first.
  communicator_.reset();
  funnel_.reset();
}

void GroupConnection::connect(comm::Store& store, std::optional<comm::CostModel> cost_model) {
  comm::CommunicatorOptions options;
  options.generation = static_cast<uint64_t>(env_.generation);
  options.job_token = env_.job_token;
  options.timeout = timeout_;
  options.point_to_point = options_.point_to_point;
  if (!env_.bind_host.empty()) options.bind_host = env_.bind_host;
  options.cost_model = cost_model ? std::move(*cost_model) : costModelOf(options_);
  if (options_.algorithm == cumulus::Algorithm::kFunnel) {
    if (env_.ps_endpoint.empty()) {
      throw GroupError(
          "the algorithm is funnel (comm.algorithm) but CUMULUS_PS_ENDPOINT is not set: start the "
          "job with "
          "cumulus-run (which hosts the parameter server for funnel) or point "
          "CUMULUS_PS_ENDPOINT at a cumulus-ps host:port");
    }
    const auto [host, port] = parseEndpoint(env_.ps_endpoint, "CUMULUS_PS_ENDPOINT");
    funnel_ = std::make_unique<comm::FunnelClient>(host, port, env_.job_token, rank(), world(),
                                                   static_cast<uint64_t>(env_.generation));
    options.remote_reducer = funnel_.get();
  }
  communicator_ = std::make_unique<comm::Communicator>(rank(), world(), store, options);
}

}  // namespace cumulus::distributed
