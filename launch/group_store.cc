#include "launch/group_store.h"

#include <sstream>

#include "base/integer.h"
#include "comm/error.h"
#include "comm/quorum.h"
#include "comm/store_keys.h"

namespace cumulus::launch {

void GroupStore::recordFailure(int64_t g, const std::string& what, bool permanent) {
  // Before the failure itself, so that whoever reads the failure finds it permanent.
  if (permanent) store_.set(comm::groupPermanentKey(g), "1");
  store_.compareSet(comm::groupFailedKey(g), "", what);
}

std::optional<GroupStore::Failure> GroupStore::failure(int64_t g) {
  std::optional<std::string> what = store_.tryGet(comm::groupFailedKey(g));
  if (!what) return std::nullopt;
  return Failure{*what, store_.tryGet(comm::groupPermanentKey(g)).has_value()};
}

void GroupStore::proposeRegroup(int64_t g, const std::string& why) {
  store_.compareSet(comm::groupRegroupKey(g), "", why);
}

std::optional<std::string> GroupStore::regroup(int64_t g) {
  return store_.tryGet(comm::groupRegroupKey(g));
}

void GroupStore::markStopped(int64_t g, int64_t node) {
  store_.set(comm::groupStoppedKey(g, node), "1");
}

void GroupStore::waitStopped(int64_t g, const std::vector<int64_t>& nodes,
                             std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int64_t id : nodes) keys.push_back(comm::groupStoppedKey(g, id));
  store_.wait(keys, timeout);
}

void GroupStore::markDone(int64_t g, int64_t node) { store_.set(comm::groupDoneKey(g, node), "1"); }

void GroupStore::waitDone(int64_t g, const std::vector<int64_t>& nodes,
                          std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int64_t id : nodes) keys.push_back(comm::groupDoneKey(g, id));
  store_.wait(keys, timeout);
}

bool GroupStore::runsInPlace(int64_t g, int64_t world) {
  if (store_.tryGet(comm::quorumRecordKey(g, 0))) return true;
  for (int64_t r = 0; r < world; ++r) {
    if (store_.tryGet(comm::quorumIdKey(g, 0, static_cast<int>(r)))) return true;
  }
  return false;
}

std::optional<std::vector<std::string>> GroupStore::liveMembers(int64_t g) {
  return comm::Quorum::liveMembers(store_, g);
}

int64_t GroupStore::nextMember(int64_t g, int64_t node, int64_t local_rank) {
  return store_.add(comm::groupSlotKey(g, node, local_rank), 1) - 1;
}

void GroupStore::markGone(int64_t g, const std::string& member_id, const std::string& why) {
  comm::Quorum::markGone(store_, g, member_id, why);
}

void GroupStore::addJoined(int64_t g, int64_t node) {
  const std::string key = comm::groupJoinedKey(g);
  for (;;) {
    const std::string before = store_.tryGet(key).value_or("");
    const std::string after = (before.empty() ? "" : before + ",") + std::to_string(node);
    if (store_.compareSet(key, before, after) == after) return;
  }
}

std::vector<int64_t> GroupStore::joined(int64_t g) {
  std::vector<int64_t> nodes;
  const std::string key = comm::groupJoinedKey(g);
  std::istringstream in(store_.tryGet(key).value_or(""));
  for (std::string id; std::getline(in, id, ',');) {
    const std::optional<int64_t> node = base::parseInteger(id, 0);
    if (!node) {
      throw cumulus::CommError(comm::ErrorKind::kBadFrame, "group.joined", 0, -1,
                               key + ": not a node id: '" + id + "'");
    }
    nodes.push_back(*node);
  }
  return nodes;
}

void GroupStore::publishParameterServer(int64_t g, const std::string& endpoint) {
  store_.set(comm::groupParameterServerKey(g), endpoint);
}

std::string GroupStore::parameterServer(int64_t g, std::chrono::milliseconds timeout) {
  return store_.get(comm::groupParameterServerKey(g), timeout);
}

void GroupStore::publishMasterPort(int64_t g, int port) {
  store_.set(comm::groupMasterPortKey(g), std::to_string(port));
}

int GroupStore::masterPort(int64_t g, std::chrono::milliseconds timeout) {
  const std::string text = store_.get(comm::groupMasterPortKey(g), timeout);
  const std::optional<int64_t> port = base::parseInteger(text, 1, 65535);
  if (!port) {
    throw CommError(CommErrorKind::kStore, "store", 0, -1,
                    "generation " + std::to_string(g) + "'s MASTER_PORT is \"" + text +
                        "\", not a port: " + base::integerProblem(text, 1, 65535));
  }
  return static_cast<int>(*port);
}

}  // namespace cumulus::launch
