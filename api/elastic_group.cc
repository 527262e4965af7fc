// ElasticGroup (api/elastic_group.h): the public ProcessGroup over the epochs of comm/quorum.h.

#include "api/elastic_group.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "api/process_group_impl.h"
#include "base/enum_names.h"
#include "base/env_names.h"
#include "base/integer.h"
#include "comm/store_client.h"
#include "distributed/group_connection.h"

namespace cumulus {
namespace {

constexpr int64_t kMaxWorkers = int64_t{1} << 20;  // ElasticSettings::max_workers's default

std::string variable(const base::EnvLookup& getenv, const char* name) {
  const char* value = getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// A worker count: an integer in [1, kMaxWorkers].
int64_t workerCount(const base::EnvLookup& getenv, const char* name, int64_t fallback) {
  const std::string text = variable(getenv, name);
  if (text.empty()) return fallback;
  const std::optional<int64_t> value = base::parseInteger(text, 1, kMaxWorkers);
  if (!value)
    throw GroupError(std::string(name) + ": " + base::integerProblem(text, 1, kMaxWorkers));
  return *value;
}

}  // namespace

std::optional<ElasticSettings> elasticSettings(const base::EnvLookup& getenv) {
  const std::string recovery = variable(getenv, base::env::kRecovery);
  const std::optional<Recovery> mode = base::valueNamed<Recovery>(recovery);
  if (recovery.empty() || mode == Recovery::kRestart) return std::nullopt;
  if (!mode) {
    throw GroupError("CUMULUS_RECOVERY=\"" + recovery + "\": must be in_place or restart");
  }
  ElasticSettings s;
  s.member_id = variable(getenv, base::env::kMemberId);
  if (s.member_id.empty() || s.member_id.find('/') != std::string::npos) {
    throw GroupError("CUMULUS_MEMBER_ID=\"" + s.member_id +
                     "\": in_place recovery needs this worker's member id (cumulus-run sets it, "
                     "e.g. 0.1.0 for node 0, local rank 1)");
  }
  const std::string join = variable(getenv, base::env::kJoin);
  s.joining = join == "1";
  s.min_workers = workerCount(getenv, base::env::kMinWorkers, 1);
  s.max_workers = workerCount(getenv, base::env::kMaxWorkers, kMaxWorkers);
  if (s.min_workers > s.max_workers) {
    throw GroupError(std::string(base::env::kMinWorkers) + "=" + std::to_string(s.min_workers) +
                     " is more than " + base::env::kMaxWorkers + "=" +
                     std::to_string(s.max_workers));
  }
  return s;
}

ElasticGroup::ElasticGroup(const GroupOptions& options, const ElasticSettings& settings,
                           const base::EnvLookup& getenv)
    : settings_(settings) {
  env_ = distributed::groupEnvironment(getenv);
  const std::chrono::milliseconds timeout =
      timeoutOption(options.timeout_seconds, "timeout_seconds");
  comm::StoreClientOptions store_options;
  store_options.connect_timeout = timeout;
  store_ = std::make_unique<comm::StoreClient>(env_.store_host, static_cast<int>(env_.store_port),
                                               env_.job_token, store_options);
  comm::QuorumOptions quorum;
  quorum.generation = env_.generation;
  quorum.member_id = settings.member_id;
  quorum.max_members = settings.max_workers;
  // Admission waits for the running group's next step boundary and for room under MAX.
  quorum.join_timeout = std::max(timeout, std::chrono::milliseconds(60000));
  quorum_ = std::make_unique<comm::Quorum>(*store_, quorum);
  // A group of one until an epoch says otherwise.
  base::RunEnv alone = env_;
  alone.rank = 0;
  alone.world_size = 1;
  // Each epoch's connections are all-reduce lanes only: an elastic group opens no point-to-point
  // lanes (its sendAsync says so), as before GroupOptions reached the connection.
  GroupOptions epoch_options = options;
  epoch_options.point_to_point = false;
  group_ = ProcessGroup::Impl::overStore(alone, epoch_options, *store_);
  if (settings.joining) return;
  const comm::QuorumEpoch first =
      quorum_->start(static_cast<int>(env_.rank), static_cast<int>(env_.world_size), timeout);
  joined_ = true;
  try {
    connect(first);
  } catch (const CommError& e) {
    if (e.kind() == CommErrorKind::kUnauthorized || e.kind() == CommErrorKind::kStore) throw;
    // A launch member lost while the others connect: they re-form without it before training.
    group_->impl().closeConnection();
    connect_error_ = e.what();
  }
}

ElasticGroup::~ElasticGroup() {
  group_.reset();  // the communicator before the Store client it may still use
}

void ElasticGroup::connect(const comm::QuorumEpoch& epoch) {
  ProcessGroup::Impl& impl = group_->impl();
  impl.closeConnection();  // the old epoch's connections close before the new ones open
  epoch_ = epoch;
  base::RunEnv env = env_;
  env.rank = epoch.rankOf(settings_.member_id);
  env.world_size = epoch.size();
  env.generation = static_cast<int64_t>(epoch.commGeneration());
  impl.env = env;
  if (env.world_size > 1) {
    impl.group =
        std::make_unique<distributed::GroupConnection>(env, impl.options, *store_, impl.cost_model);
  }
}

bool ElasticGroup::join() {
  std::optional<comm::QuorumEpoch> epoch = quorum_->join();
  if (!epoch) return false;
  connect(*epoch);
  joined_ = true;
  return true;
}

void ElasticGroup::finish(int64_t last_step) { quorum_->finish(last_step); }

const comm::QuorumEpoch& ElasticGroup::reform(int64_t steps_done,
                                              const std::vector<int>& leaving_ranks,
                                              bool heal_everyone) {
  std::vector<std::string> leaving;
  for (int r : leaving_ranks) leaving.push_back(epoch_.members.at(static_cast<size_t>(r)));
  // Close this epoch's connections first: peers still blocked on them fail at once.
  group_->impl().closeConnection();
  connect_error_.clear();
  connect(quorum_->reform(epoch_, steps_done, leaving, heal_everyone));
  return epoch_;
}

int64_t ElasticGroup::pendingJoiners() { return quorum_->pendingJoiners(epoch_); }

bool ElasticGroup::joinersWaiting(int64_t steps_done) {
  constexpr double kLookSeconds = 0.2;
  constexpr int64_t kLookSteps = 16;
  if (group_->rank() != 0 || group_->size() >= settings_.max_workers) return false;
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (joiners_checked_at_ >= 0 && t - joiners_checked_at_ < kLookSeconds &&
      steps_done - joiners_checked_step_ < kLookSteps) {
    return false;
  }
  joiners_checked_at_ = t;
  joiners_checked_step_ = steps_done;
  return pendingJoiners() > 0;
}

void ElasticGroup::leave(const std::string& why) { quorum_->leave(why); }

}  // namespace cumulus
