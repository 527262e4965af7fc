// Making a ProcessGroup (<cumulus/process_group.h>): its options validated and its cost model
// loaded once, its members read from the environment or given by the caller, its GroupConnection
// opened when it has more than one rank; and what the group says about itself. Its collectives
// are process_group.cc's.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "api/process_group_impl.h"
#include "base/bind_address.h"
#include "base/env_names.h"
#include "distributed/group_connection.h"

namespace cumulus {
namespace {

std::unique_ptr<distributed::GroupConnection> groupOfSeveral(const ProcessGroup::Impl& impl,
                                                             comm::Store* store) {
  if (impl.env.world_size == 1) return nullptr;
  if (store != nullptr) {
    return std::make_unique<distributed::GroupConnection>(impl.env, impl.options, *store,
                                                          impl.cost_model);
  }
  return std::make_unique<distributed::GroupConnection>(impl.env, impl.options, impl.cost_model);
}

}  // namespace

std::unique_ptr<ProcessGroup::Impl> ProcessGroup::Impl::validated(const GroupOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->algorithm = options.algorithm;
  impl->timeout = timeoutOption(options.timeout_seconds, "timeout_seconds");
  impl->cost_model = distributed::costModelOf(options);
  return impl;
}

std::unique_ptr<ProcessGroup> ProcessGroup::Impl::wrap(std::unique_ptr<Impl> impl) {
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

std::unique_ptr<ProcessGroup> ProcessGroup::Impl::fromEnvironment(const GroupOptions& options,
                                                                  const base::EnvLookup& getenv) {
  std::unique_ptr<Impl> impl = validated(options);
  try {
    impl->env = base::RunEnv::fromEnvironment(getenv);
  } catch (const base::EnvError& e) {
    throw GroupError(e.what());
  }
  // A group of several also needs the Store's address: the stricter reader names what is missing.
  if (impl->env.world_size > 1) impl->env = distributed::groupEnvironment(getenv);
  impl->group = groupOfSeveral(*impl, nullptr);
  return wrap(std::move(impl));
}

std::unique_ptr<ProcessGroup> ProcessGroup::Impl::overStore(const base::RunEnv& env,
                                                            const GroupOptions& options,
                                                            comm::Store& store) {
  std::unique_ptr<Impl> impl = validated(options);
  impl->env = env;
  impl->group = groupOfSeveral(*impl, &store);
  return wrap(std::move(impl));
}

std::unique_ptr<ProcessGroup> ProcessGroup::fromEnvironment(const GroupOptions& options) {
  return Impl::fromEnvironment(options, base::systemEnvironment);
}

namespace {

void checkMember(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw GroupError("rank " + std::to_string(rank) + " is out of range for a group of " +
                     std::to_string(size) + ": it must be in [0, " + std::to_string(size) + ")");
  }
}

}  // namespace

GroupMember GroupMember::fromEnvironment(int rank, int size) {
  checkMember(rank, size);
  base::RunEnv env;
  try {
    env = base::RunEnv::fromEnvironment(base::memberEnvironment);
  } catch (const base::EnvError& e) {
    throw GroupError(e.what());
  }
  GroupMember member;
  member.rank = rank;
  member.size = size;
  member.generation = static_cast<uint64_t>(env.generation);
  member.job_token = env.job_token;
  member.bind_host = env.bind_host;
  member.parameter_server = env.ps_endpoint;
  if (member.bind_host.empty() && !env.store_host.empty() && size > 1) {
    try {
      member.bind_host = base::routeSourceAddress(env.store_host);
    } catch (const std::exception& e) {
      throw GroupError(std::string("no address to listen on (") + e.what() +
                       "); set CUMULUS_BIND_HOST to this host's address that the other ranks "
                       "reach");
    }
  }
  return member;
}

std::unique_ptr<ProcessGroup> ProcessGroup::overStore(Store& store, const GroupMember& member,
                                                      const GroupOptions& options) {
  checkMember(member.rank, member.size);
  if (member.generation > static_cast<uint64_t>(INT64_MAX)) {
    throw GroupError("generation " + std::to_string(member.generation) +
                     " is out of range: it must be at most " + std::to_string(INT64_MAX));
  }
  base::RunEnv env;
  env.rank = member.rank;
  env.world_size = member.size;
  env.generation = static_cast<int64_t>(member.generation);
  env.job_token = member.job_token;
  env.bind_host = member.bind_host;
  env.ps_endpoint = member.parameter_server;
  return Impl::overStore(env, options, store);
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return static_cast<int>(impl_->env.rank); }
int ProcessGroup::size() const { return static_cast<int>(impl_->env.world_size); }
int ProcessGroup::localRank() const { return static_cast<int>(impl_->env.local_rank); }
int ProcessGroup::localSize() const { return static_cast<int>(impl_->env.local_world_size); }
uint64_t ProcessGroup::generation() const { return static_cast<uint64_t>(impl_->env.generation); }
int ProcessGroup::restartCount() const { return static_cast<int>(impl_->env.restart_count); }
std::string ProcessGroup::runId() const { return impl_->env.run_id; }
bool ProcessGroup::underLauncher() const { return !impl_->env.run_id.empty(); }
const GroupOptions& ProcessGroup::options() const { return impl_->options; }
uint64_t ProcessGroup::bytesSent() const {
  const comm::Communicator* communicator = impl_->communicator();
  return impl_->bytes_sent_before + (communicator != nullptr ? communicator->bytesSent() : 0);
}

namespace {

// Adds each kind's counts of `more` to `sum`'s.
void addOpStats(std::map<std::string, comm::OpStats>& sum,
                const std::map<std::string, comm::OpStats>& more) {
  for (const auto& [op, s] : more) {
    comm::OpStats& to = sum[op];
    to.count += s.count;
    to.seconds += s.seconds;
    to.bytes_sent += s.bytes_sent;
  }
}

}  // namespace

std::vector<CollectiveStats> ProcessGroup::collectiveStats() const {
  std::map<std::string, comm::OpStats> all = impl_->op_stats_before;
  if (const comm::Communicator* communicator = impl_->communicator()) {
    addOpStats(all, communicator->opStats());
  }
  std::vector<CollectiveStats> out;
  for (const auto& [op, s] : all) out.push_back({op, s.count, s.seconds, s.bytes_sent});
  return out;
}

void ProcessGroup::Impl::closeConnection() {
  if (group) {
    bytes_sent_before += group->communicator().bytesSent();
    addOpStats(op_stats_before, group->communicator().opStats());
  }
  group.reset();
}

}  // namespace cumulus
