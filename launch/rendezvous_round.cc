#include "launch/rendezvous_round.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/error.h"
#include "comm/store_keys.h"

namespace cumulus::launch {
namespace {

// The round's keys (comm/store_keys.h). `settled` is set by the host once round `g` is no longer
// open: the others block on it in the Store (one long-poll call at a time) instead of reading the
// state many times a second.
using comm::roundAckKey;
using comm::roundComingKey;
using comm::roundSettledKey;
using comm::roundStateKey;

std::string idList(const std::vector<RoundNode>& nodes) {
  std::string out;
  for (const RoundNode& n : nodes) out += (out.empty() ? "" : ",") + std::to_string(n.node_id);
  return out;
}

std::string seconds(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0;
  return out.str();
}

}  // namespace

int64_t Round::worldSize() const {
  int64_t world = 0;
  for (const RoundNode& n : nodes) world += n.nproc;
  return world;
}

int64_t Round::nodeRankOf(int64_t node_id) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].node_id == node_id) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t Round::firstRankOf(int64_t node_id) const {
  int64_t rank = 0;
  for (const RoundNode& n : nodes) {
    if (n.node_id == node_id) return rank;
    rank += n.nproc;
  }
  throw std::logic_error("node " + std::to_string(node_id) + " is not in the group");
}

std::string Round::nodeIds() const { return idList(nodes); }

// The parsed value of `rdzv/<g>/state`; `raw` is the value as read ("" when the key is missing,
// which is an open round nobody joined yet).
struct RendezvousRound::State {
  enum class Kind { kOpen, kClosed, kEnded };
  Kind kind = Kind::kOpen;
  std::vector<RoundNode> nodes;
  int64_t restarts = 0;
  int exit_code = 0;
  std::string reason;
  std::string raw;

  // The JSON of each kind (keys in this order; "nodes" in join order while open, by node id
  // once closed):
  //   {"state":"open","nodes":[{"id":0,"nproc":2,"nonce":"N"},…]}
  //   {"state":"closed","restarts":R,"nodes":[…]}
  //   {"state":"ended","exit_code":C,"reason":"…"}
  // encode() is deterministic, since compare-and-set compares the text.
  static State parse(const std::string& raw, int64_t g) {
    State s;
    s.raw = raw;
    if (raw.empty()) return s;
    auto bad = [&](const std::string& field, const std::string& problem) {
      return std::runtime_error("malformed rendezvous state " + roundStateKey(g) + ": " +
                                (field.empty() ? "" : "\"" + field + "\": ") + problem + " in " +
                                raw);
    };
    const nlohmann::json root = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) throw bad("", "not JSON");
    if (!root.is_object()) throw bad("", "expected an object");
    auto integer = [&](const nlohmann::json& in, const char* key, const std::string& field) {
      if (!in.contains(key) || !in.at(key).is_number_integer()) {
        throw bad(field, "expected an integer");
      }
      return in.at(key).get<int64_t>();
    };
    auto text = [&](const nlohmann::json& in, const char* key, const std::string& field) {
      if (!in.contains(key) || !in.at(key).is_string()) throw bad(field, "expected a string");
      return in.at(key).get<std::string>();
    };
    const std::string kind = text(root, "state", "state");
    if (kind == "ended") {
      s.kind = Kind::kEnded;
      const int64_t code = integer(root, "exit_code", "exit_code");
      if (code < std::numeric_limits<int>::min() || code > std::numeric_limits<int>::max()) {
        throw bad("exit_code", "expected an int");
      }
      s.exit_code = static_cast<int>(code);
      s.reason = text(root, "reason", "reason");
      return s;
    }
    if (kind == "closed") {
      s.kind = Kind::kClosed;
      s.restarts = integer(root, "restarts", "restarts");
    } else if (kind != "open") {
      throw bad("state", "expected open, closed or ended");
    }
    if (!root.contains("nodes") || !root.at("nodes").is_array()) {
      throw bad("nodes", "expected a list");
    }
    const nlohmann::json& nodes = root.at("nodes");
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string field = "nodes[" + std::to_string(i) + "]";
      if (!nodes[i].is_object()) throw bad(field, "expected an object");
      RoundNode n;
      n.node_id = integer(nodes[i], "id", field + ".id");
      n.nproc = integer(nodes[i], "nproc", field + ".nproc");
      n.nonce = text(nodes[i], "nonce", field + ".nonce");
      s.nodes.push_back(std::move(n));
    }
    return s;
  }

  std::string encode() const {
    nlohmann::ordered_json out;
    if (kind == Kind::kEnded) {
      out["state"] = "ended";
      out["exit_code"] = exit_code;
      out["reason"] = reason;
      return out.dump();
    }
    out["state"] = kind == Kind::kOpen ? "open" : "closed";
    if (kind == Kind::kClosed) out["restarts"] = restarts;
    out["nodes"] = nlohmann::ordered_json::array();
    for (const RoundNode& n : nodes) {
      out["nodes"].push_back({{"id", n.node_id}, {"nproc", n.nproc}, {"nonce", n.nonce}});
    }
    return out.dump();
  }

  Round toRound(int64_t g) const {
    Round r;
    r.generation = g;
    r.outcome = kind == Kind::kEnded ? Round::Outcome::kEnded : Round::Outcome::kClosed;
    r.nodes = nodes;
    r.restarts = restarts;
    r.exit_code = exit_code;
    r.reason = reason;
    return r;
  }
};

RendezvousRound::RendezvousRound(comm::Store& store, RendezvousOptions options, RoundNode self,
                                 std::function<bool()> interrupted,
                                 std::function<void(const std::string&)> note)
    : store_(store),
      options_(options),
      self_(std::move(self)),
      interrupted_(std::move(interrupted)),
      note_(std::move(note)) {
  if (self_.nonce.empty() || self_.nonce.find_first_of(" :") != std::string::npos) {
    throw std::invalid_argument(
        "rendezvous round: the nonce must be non-empty, without ' ' or ':'");
  }
}

void RendezvousRound::noteUnread(int64_t g, size_t nodes, std::chrono::milliseconds linger,
                                 const cumulus::CommError& error) const {
  // The round has ended either way; a node that never read why is gone or will find out when it
  // next reads the round, so this is worth a line, not a failure.
  if (note_)
    note_("of the " + std::to_string(nodes) + " node(s) waiting in the rendezvous of generation " +
          std::to_string(g) + ", not all confirmed within " + seconds(linger) +
          " s that they read why it ended: " + error.what());
}

std::chrono::steady_clock::time_point RendezvousRound::clockNow() const {
  return options_.now ? options_.now() : std::chrono::steady_clock::now();
}

void RendezvousRound::sleep() const { std::this_thread::sleep_for(options_.poll); }

void RendezvousRound::awaitSettled(int64_t g) {
  try {
    store_.wait({roundSettledKey(g)}, kWaitSlice);
  } catch (const cumulus::CommError& e) {
    if (e.kind() != comm::ErrorKind::kTimeout) throw;
  }
}

bool RendezvousRound::settle(int64_t g, const std::string& expected, const std::string& desired) {
  if (store_.compareSet(roundStateKey(g), expected, desired) != desired) return false;
  store_.set(roundSettledKey(g), "1");
  return true;
}

bool RendezvousRound::tryJoin(int64_t g, State& state) {
  for (;;) {
    state = State::parse(store_.tryGet(roundStateKey(g)).value_or(""), g);
    if (state.kind != State::Kind::kOpen) return false;
    for (const RoundNode& n : state.nodes) {
      if (n.node_id != self_.node_id) continue;
      if (n.nonce == self_.nonce) return true;
      throw RendezvousError(
          "node " + std::to_string(self_.node_id) +
          " already joined the rendezvous of generation " + std::to_string(g) +
          " from another cumulus-run (or from one that died while waiting there): give every "
          "node its own --node-rank");
    }
    // A full round is about to close without us: we are late, whatever happens next.
    if (static_cast<int64_t>(state.nodes.size()) >= options_.max_nodes) {
      if (interrupted()) return false;
      sleep();
      continue;
    }
    State joined = state;
    joined.nodes.push_back(self_);
    const std::string desired = joined.encode();
    if (store_.compareSet(roundStateKey(g), state.raw, desired) == desired) return true;
  }
}

Round RendezvousRound::join(int64_t generation, int64_t restarts) {
  State skipped;
  for (int64_t g = generation;; ++g) {
    State state;
    if (!tryJoin(g, state)) {
      if (state.kind == State::Kind::kEnded) return state.toRound(g);
      if (state.kind == State::Kind::kOpen) {  // interrupted while waiting on a full round
        Round r;
        r.outcome = Round::Outcome::kInterrupted;
        r.generation = g;
        return r;
      }
      skipped = state;  // closed without this node
      if (options_.join_running && !store_.tryGet(roundStateKey(g + 1))) {
        Round running = state.toRound(g);  // the newest round: its group is the running one
        running.outcome = Round::Outcome::kRunning;
        return running;
      }
      continue;
    }
    if (g > generation && note_) {
      note_("the group of generation " + std::to_string(g - 1) +
            " formed without this node (nodes " + idList(skipped.nodes) +
            "); waiting in the rendezvous of generation " + std::to_string(g));
    }
    return waitForClose(g, restarts);
  }
}

Round RendezvousRound::waitForClose(int64_t g, int64_t restarts) {
  const bool host = self_.node_id == kHostId;
  if (host) {
    last_seen_.clear();
    last_change_ = clockNow();
    host_deadline_ = last_change_ + options_.timeout;
  }
  for (;;) {
    if (interrupted()) {
      if (!host) leave(g);
      Round r;
      r.outcome = Round::Outcome::kInterrupted;
      r.generation = g;
      return r;
    }
    State state = State::parse(store_.tryGet(roundStateKey(g)).value_or(""), g);
    if (host && state.kind == State::Kind::kOpen && maybeClose(g, state, restarts)) continue;
    if (state.kind == State::Kind::kClosed) {
      Round r = state.toRound(g);
      if (r.nodeRankOf(self_.node_id) < 0) {
        throw std::logic_error("rendezvous of generation " + std::to_string(g) +
                               " closed without node " + std::to_string(self_.node_id) +
                               ", which had joined it");
      }
      previous_group_.clear();
      for (const RoundNode& n : r.nodes) previous_group_.push_back(n.node_id);
      return r;
    }
    if (state.kind == State::Kind::kEnded) {
      store_.set(roundAckKey(g, self_.node_id), self_.nonce);
      return state.toRound(g);
    }
    if (host) {
      sleep();
    } else {
      awaitSettled(g);
    }
  }
}

void RendezvousRound::leave(int64_t g) {
  for (;;) {
    State state = State::parse(store_.tryGet(roundStateKey(g)).value_or(""), g);
    if (state.kind != State::Kind::kOpen) return;  // too late: the group fails without us
    State left = state;
    left.nodes.erase(std::remove_if(left.nodes.begin(), left.nodes.end(),
                                    [&](const RoundNode& n) { return n.nonce == self_.nonce; }),
                     left.nodes.end());
    if (left.nodes.size() == state.nodes.size()) return;
    const std::string desired = left.encode();
    if (store_.compareSet(roundStateKey(g), state.raw, desired) == desired) return;
  }
}

bool RendezvousRound::maybeClose(int64_t g, State& state, int64_t restarts) {
  const auto now = clockNow();
  if (state.raw != last_seen_) {
    last_seen_ = state.raw;
    last_change_ = now;
  }
  const int64_t joined = static_cast<int64_t>(state.nodes.size());
  // Members of the last group that said they are on their way (they saw the failure and are
  // stopping their workers, which can take up to --stop-grace): worth waiting for.
  bool rejoiner_missing = false;
  for (int64_t id : previous_group_) {
    bool in = std::any_of(state.nodes.begin(), state.nodes.end(),
                          [&](const RoundNode& n) { return n.node_id == id; });
    if (!in && store_.tryGet(roundComingKey(g, id))) rejoiner_missing = true;
  }
  const bool quiet = now - last_change_ >= options_.last_call;
  const bool expired = now >= host_deadline_;
  if (joined >= options_.max_nodes ||
      (joined >= options_.min_nodes && ((quiet && !rejoiner_missing) || expired))) {
    State closed = state;
    closed.kind = State::Kind::kClosed;
    closed.restarts = restarts;
    std::sort(closed.nodes.begin(), closed.nodes.end(),
              [](const RoundNode& a, const RoundNode& b) { return a.node_id < b.node_id; });
    settle(g, state.raw, closed.encode());
    return true;  // closed, or someone joined meanwhile: read again either way
  }
  if (!expired) return false;
  const std::string nnodes =
      options_.min_nodes == options_.max_nodes
          ? std::to_string(options_.max_nodes)
          : std::to_string(options_.min_nodes) + ":" + std::to_string(options_.max_nodes);
  std::vector<RoundNode> joined_nodes = state.nodes;
  std::sort(joined_nodes.begin(), joined_nodes.end(),
            [](const RoundNode& a, const RoundNode& b) { return a.node_id < b.node_id; });
  State ended;
  ended.kind = State::Kind::kEnded;
  ended.exit_code = g == 0 ? 2 : 1;
  ended.reason = "only " + std::to_string(joined) +
                 " node(s) joined the rendezvous of generation " + std::to_string(g) +
                 " within --rdzv-timeout " + seconds(options_.timeout) + " s (nodes " +
                 idList(joined_nodes) + "), fewer than the " + std::to_string(options_.min_nodes) +
                 " that --nnodes " + nnodes + " needs";
  if (settle(g, state.raw, ended.encode())) {
    // Keep the Store up until the nodes that did join have read why (bounded).
    std::vector<std::string> acks;
    for (const RoundNode& n : state.nodes) {
      if (n.node_id != self_.node_id) acks.push_back(roundAckKey(g, n.node_id));
    }
    const auto linger = std::min(options_.timeout, std::chrono::milliseconds(5000));
    try {
      if (!acks.empty()) store_.wait(acks, linger);
    } catch (const cumulus::CommError& e) {
      noteUnread(g, acks.size(), linger, e);
    }
  }
  return true;
}

std::vector<int64_t> RendezvousRound::waiting(int64_t generation) {
  State state = State::parse(store_.tryGet(roundStateKey(generation)).value_or(""), generation);
  std::vector<int64_t> ids;
  if (state.kind != State::Kind::kOpen) return ids;
  for (const RoundNode& n : state.nodes) ids.push_back(n.node_id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

void RendezvousRound::announceRejoin(int64_t next_generation) {
  store_.set(roundComingKey(next_generation, self_.node_id), self_.nonce);
}

int RendezvousRound::end(int64_t generation, int exit_code, const std::string& reason,
                         std::chrono::milliseconds linger) {
  for (;;) {
    State state = State::parse(store_.tryGet(roundStateKey(generation)).value_or(""), generation);
    if (state.kind != State::Kind::kOpen) return 0;
    State ended;
    ended.kind = State::Kind::kEnded;
    ended.exit_code = exit_code;
    ended.reason = reason;
    if (!settle(generation, state.raw, ended.encode())) continue;
    std::vector<std::string> acks;
    for (const RoundNode& n : state.nodes) {
      if (n.node_id != self_.node_id) acks.push_back(roundAckKey(generation, n.node_id));
    }
    try {
      if (!acks.empty()) store_.wait(acks, linger);
    } catch (const cumulus::CommError& e) {
      noteUnread(generation, acks.size(), linger, e);
    }
    return static_cast<int>(acks.size());
  }
}

}  // namespace cumulus::launch
