#include "comm/quorum.h"

#include <algorithm>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/integer.h"
#include "comm/error.h"
#include "comm/store_keys.h"

namespace cumulus::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kEpochsPerGeneration = 1000000;
// A joiner sets its ticket's key right after taking the ticket; a closer waits this long for it.
constexpr std::chrono::milliseconds kTicketWait{5000};
// How often a waiting joiner checks that some member is left to admit it.
constexpr std::chrono::milliseconds kLookForMembers{500};

// "<node>.<local>.<n>" as numbers, so that "10.0.0" sorts after "2.0.0"; any other id sorts after
// those, as text.
std::pair<std::vector<int64_t>, std::string> idOrder(const std::string& id) {
  std::vector<int64_t> fields;
  size_t at = 0;
  while (at <= id.size()) {
    const size_t dot = std::min(id.find('.', at), id.size());
    const std::string part = id.substr(at, dot - at);
    const std::optional<int64_t> field =
        part.size() > 15 ? std::nullopt : base::parseInteger(part, 0);
    if (!field || part[0] == '-') return {{INT64_MAX}, id};
    fields.push_back(*field);
    at = dot + 1;
  }
  return {fields, id};
}

bool idLess(const std::string& a, const std::string& b) { return idOrder(a) < idOrder(b); }

bool contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::string epochName(int64_t generation, int64_t epoch) {
  return "epoch " + std::to_string(epoch) + " of generation " + std::to_string(generation);
}

}  // namespace

uint64_t QuorumEpoch::commGeneration() const {
  return static_cast<uint64_t>(generation) * kEpochsPerGeneration + static_cast<uint64_t>(epoch) +
         1;
}

int QuorumEpoch::rankOf(const std::string& id) const {
  const auto it = std::find(members.begin(), members.end(), id);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

bool QuorumEpoch::isStale(int rank) const {
  return std::find(stale.begin(), stale.end(), rank) != stale.end();
}

std::string QuorumEpoch::encode() const {
  nlohmann::ordered_json j{{"members", members},
                           {"step", step},
                           {"source", source},
                           {"stale", stale},
                           {"admitted", admitted}};
  return j.dump();
}

QuorumEpoch QuorumEpoch::decode(const std::string& text, int64_t generation, int64_t epoch) {
  QuorumEpoch e;
  e.generation = generation;
  e.epoch = epoch;
  const std::string key = quorumRecordKey(generation, epoch);
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    e.members = j.at("members").get<std::vector<std::string>>();
    e.step = j.at("step").get<int64_t>();
    e.source = j.at("source").get<int>();
    e.stale = j.at("stale").get<std::vector<int>>();
    e.admitted = j.at("admitted").get<int64_t>();
  } catch (const nlohmann::json::exception& error) {
    throw CommError(ErrorKind::kBadFrame, "quorum", static_cast<uint64_t>(epoch), -1,
                    key + ": not a membership record (" + error.what() + "): " + text);
  }
  const int n = e.size();
  const bool source_ok = e.stale.empty() ? e.source == -1 : (e.source >= 0 && e.source < n);
  const bool stale_ok = std::all_of(e.stale.begin(), e.stale.end(),
                                    [&](int r) { return r >= 0 && r < n && r != e.source; });
  if (n == 0 || !source_ok || !stale_ok || e.admitted < 0) {
    throw CommError(ErrorKind::kBadFrame, "quorum", static_cast<uint64_t>(epoch), -1,
                    key + ": inconsistent membership record: " + text);
  }
  return e;
}

Quorum::Quorum(Store& store, QuorumOptions options) : store_(store), options_(std::move(options)) {}

QuorumEpoch Quorum::start(int rank, int world, std::chrono::milliseconds timeout) {
  const int64_t g = options_.generation;
  store_.set(quorumIdKey(g, 0, rank), options_.member_id);
  if (rank != 0) return waitForRecord(0, Clock::now() + timeout);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(quorumIdKey(g, 0, r));
  store_.wait(keys, timeout);
  QuorumEpoch first;
  first.generation = g;
  first.epoch = 0;
  for (const std::string& key : keys) first.members.push_back(store_.get(key, timeout));
  const std::string record = first.encode();
  const std::string winner = store_.compareSet(quorumRecordKey(g, 0), "", record);
  if (winner == record) store_.set(quorumLatestKey(g), "0");
  return QuorumEpoch::decode(winner, g, 0);
}

bool Quorum::present(int64_t epoch, const std::string& id) {
  return store_.tryGet(quorumPresentKey(options_.generation, epoch, id)).has_value();
}

bool Quorum::gone(const std::string& id) {
  return store_.tryGet(quorumGoneKey(options_.generation, id)).has_value();
}

QuorumEpoch Quorum::reform(const QuorumEpoch& last, int64_t steps_done,
                           const std::vector<std::string>& leaving, bool heal_everyone) {
  const int64_t g = options_.generation;
  const int64_t next = last.epoch + 1;
  const std::string& me = options_.member_id;
  store_.set(quorumPresentKey(g, next, me), std::to_string(steps_done));
  const Clock::time_point arrived = Clock::now();
  for (;;) {
    if (std::optional<Bytes> record = store_.tryGet(quorumRecordKey(g, next))) {
      QuorumEpoch e = QuorumEpoch::decode(*record, g, next);
      if (e.rankOf(me) >= 0) return e;
      return admitted(join(), next);  // not in it: fenced out, join again
    }
    bool everyone = true;
    for (const std::string& m : last.members) {
      if (m == me || contains(leaving, m) || present(next, m) || gone(m)) continue;
      everyone = false;
      break;
    }
    if (everyone || Clock::now() - arrived >= options_.window) {
      QuorumEpoch e = close(last, leaving, heal_everyone);
      return e.rankOf(me) >= 0 ? e : admitted(join(), next);
    }
    std::this_thread::sleep_for(options_.poll);
  }
}

QuorumEpoch Quorum::close(const QuorumEpoch& last, const std::vector<std::string>& leaving,
                          bool heal_everyone) {
  const int64_t g = options_.generation;
  QuorumEpoch e;
  e.generation = g;
  e.epoch = last.epoch + 1;
  std::vector<int64_t> done;
  for (const std::string& m : last.members) {
    if (contains(leaving, m) || gone(m)) continue;
    const std::optional<Bytes> value = store_.tryGet(quorumPresentKey(g, e.epoch, m));
    if (!value) continue;
    // -1: a member without the training state (a joiner).
    const std::optional<int64_t> steps = base::parseInteger(*value, -1);
    if (!steps) {
      throw CommError(ErrorKind::kBadFrame, "quorum", static_cast<uint64_t>(e.epoch), -1,
                      quorumPresentKey(g, e.epoch, m) + ": not a step count: '" + *value + "'");
    }
    e.members.push_back(m);
    done.push_back(*steps);
  }
  const int64_t room = options_.max_members - static_cast<int64_t>(e.members.size());
  e.admitted = last.admitted;
  for (const std::string& joiner : waitingJoiners(last.admitted + 1, room, &e.admitted)) {
    e.members.push_back(joiner);
    done.push_back(-1);
  }
  e.step = done.empty() ? -1 : *std::max_element(done.begin(), done.end());
  for (size_t r = 0; r < done.size(); ++r) {
    if (done[r] == e.step && e.source < 0 && e.step >= 0) e.source = static_cast<int>(r);
  }
  for (size_t r = 0; r < done.size(); ++r) {
    const bool behind = done[r] < e.step || (heal_everyone && static_cast<int>(r) != e.source);
    if (e.source >= 0 && behind) e.stale.push_back(static_cast<int>(r));
  }
  if (e.stale.empty()) e.source = -1;  // every member already holds the state
  if (e.members.empty()) {
    // Nobody is left to train (this member was marked gone while it reformed): say so as the
    // record would not.
    throw CommError(ErrorKind::kRendezvous, "quorum", static_cast<uint64_t>(e.epoch), -1,
                    epochName(g, e.epoch) + ": no member of epoch " + std::to_string(last.epoch) +
                        " is present or alive");
  }
  const std::string record = e.encode();
  const std::string winner = store_.compareSet(quorumRecordKey(g, e.epoch), "", record);
  if (winner == record) store_.set(quorumLatestKey(g), std::to_string(e.epoch));
  return QuorumEpoch::decode(winner, g, e.epoch);
}

std::vector<std::string> Quorum::waitingJoiners(int64_t from_ticket, int64_t room,
                                                int64_t* admitted) {
  const int64_t g = options_.generation;
  std::vector<std::string> joiners;
  const int64_t tickets = store_.add(quorumTicketsKey(g), 0);
  for (int64_t t = from_ticket; t <= tickets && static_cast<int64_t>(joiners.size()) < room; ++t) {
    const std::string id = store_.get(quorumTicketKey(g, t), kTicketWait);
    *admitted = t;
    if (!gone(id)) joiners.push_back(id);
  }
  std::sort(joiners.begin(), joiners.end(), idLess);
  return joiners;
}

QuorumEpoch Quorum::waitForRecord(int64_t epoch, Clock::time_point deadline) {
  const int64_t g = options_.generation;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  try {
    return QuorumEpoch::decode(
        store_.get(quorumRecordKey(g, epoch), std::max(left, std::chrono::milliseconds(1))), g,
        epoch);
  } catch (const CommError& e) {
    if (e.kind() != ErrorKind::kTimeout) throw;
    throw CommError(ErrorKind::kTimeout, "quorum", static_cast<uint64_t>(epoch), -1,
                    epochName(g, epoch) +
                        " did not close in time (rank 0 of the launch never "
                        "published the group)");
  }
}

QuorumEpoch Quorum::admitted(std::optional<QuorumEpoch> epoch, int64_t fenced_from) {
  if (epoch) return *epoch;
  throw CommError(ErrorKind::kRendezvous, "quorum", static_cast<uint64_t>(fenced_from), -1,
                  "member " + options_.member_id + " was left out of " +
                      epochName(options_.generation, fenced_from) +
                      " and the group finished training before it could join again");
}

void Quorum::finish(int64_t last_step) {
  store_.set(quorumFinishedKey(options_.generation), std::to_string(last_step));
}

std::optional<QuorumEpoch> Quorum::join() {
  const int64_t g = options_.generation;
  const std::string& me = options_.member_id;
  const int64_t ticket = store_.add(quorumTicketsKey(g), 1);
  store_.set(quorumTicketKey(g, ticket), me);
  const Clock::time_point deadline = Clock::now() + options_.join_timeout;
  Clock::time_point next_look = Clock::now();
  int64_t epoch = 0;
  if (std::optional<Bytes> latest = store_.tryGet(quorumLatestKey(g))) {
    epoch = base::parseInteger(*latest, 0).value_or(0);  // only a hint: else scan from the first
  }
  for (;;) {
    if (std::optional<Bytes> record = store_.tryGet(quorumRecordKey(g, epoch))) {
      QuorumEpoch e = QuorumEpoch::decode(*record, g, epoch);
      if (e.rankOf(me) >= 0) return e;
      ++epoch;
      continue;
    }
    if (store_.tryGet(quorumFinishedKey(g))) return std::nullopt;
    if (Clock::now() >= next_look) {
      // Every member of the newest epoch gone: no one is left to admit this member, and waiting
      // out the deadline would only delay the launcher's restart of the group.
      next_look = Clock::now() + kLookForMembers;
      const std::optional<std::vector<std::string>> live = liveMembers(store_, g);
      if (live && live->empty()) {
        throw CommError(ErrorKind::kRendezvous, "quorum.join", static_cast<uint64_t>(ticket), -1,
                        "member " + me + " cannot join the group of generation " +
                            std::to_string(g) +
                            ": every member of its newest epoch is gone, so no member holds the "
                            "training state; the launcher restarts the group from its newest "
                            "checkpoint");
      }
    }
    if (Clock::now() >= deadline) {
      throw CommError(
          ErrorKind::kTimeout, "quorum.join", static_cast<uint64_t>(ticket), -1,
          "member " + me + " was not admitted to the group of generation " + std::to_string(g) +
              " within " + std::to_string(options_.join_timeout.count()) + " ms (last epoch " +
              std::to_string(epoch - 1) + "); the group may be full (MAX) or no longer running");
    }
    std::this_thread::sleep_for(options_.poll);
  }
}

int64_t Quorum::pendingJoiners(const QuorumEpoch& current) {
  return store_.add(quorumTicketsKey(options_.generation), 0) - current.admitted;
}

bool Quorum::waitForJoiner(const QuorumEpoch& current, std::chrono::milliseconds timeout) {
  try {
    store_.wait({quorumTicketKey(options_.generation, current.admitted + 1)}, timeout);
    return true;
  } catch (const CommError& e) {
    if (e.kind() == ErrorKind::kTimeout) return false;
    throw;
  }
}

void Quorum::leave(const std::string& why) {
  markGone(store_, options_.generation, options_.member_id, why);
}

void Quorum::markGone(Store& store, int64_t generation, const std::string& member_id,
                      const std::string& why) {
  store.set(quorumGoneKey(generation, member_id), why);
}

std::optional<std::vector<std::string>> Quorum::liveMembers(Store& store, int64_t generation) {
  if (!store.tryGet(quorumRecordKey(generation, 0))) return std::nullopt;
  int64_t epoch = 0;
  if (std::optional<Bytes> latest = store.tryGet(quorumLatestKey(generation))) {
    epoch = base::parseInteger(*latest, 0).value_or(0);
  }
  // The latest key is set after its record: a newer record may already be there.
  std::optional<Bytes> record = store.tryGet(quorumRecordKey(generation, epoch));
  while (std::optional<Bytes> next = store.tryGet(quorumRecordKey(generation, epoch + 1))) {
    record = std::move(next);
    ++epoch;
  }
  if (!record) return std::nullopt;
  std::vector<std::string> live;
  for (const std::string& m : QuorumEpoch::decode(*record, generation, epoch).members) {
    if (!store.tryGet(quorumGoneKey(generation, m))) live.push_back(m);
  }
  return live;
}

}  // namespace cumulus::comm
