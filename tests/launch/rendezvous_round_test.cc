// The elastic rendezvous round (launch/rendezvous_round.h) on an in-process MemoryStore: each
// node is a thread with its own RendezvousRound, as each launcher has its own.

#include "launch/rendezvous_round.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "comm/memory_store.h"

namespace cumulus::launch {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

RendezvousOptions elastic(int64_t min, int64_t max, int last_call_ms = 300, int timeout_ms = 3000) {
  RendezvousOptions o;
  o.min_nodes = min;
  o.max_nodes = max;
  o.last_call = milliseconds(last_call_ms);
  o.timeout = milliseconds(timeout_ms);
  o.poll = milliseconds(5);
  return o;
}

RoundNode node(int64_t id, int64_t nproc = 2) {
  return RoundNode{id, nproc, "n" + std::to_string(id) + "x"};
}

// A clock that moves only when the test advances it, and counts how often it was read: the
// host reads it once per look at the round, so "read twice more" means "has seen the round as it
// is now, at this time".
class ManualClock {
 public:
  Clock::time_point now() {
    reads_++;
    return start_ + milliseconds(offset_ms_.load());
  }
  void advance(milliseconds by) { offset_ms_ += by.count(); }
  // Waits (bounded) until the clock was read `more` times after this call.
  bool awaitReads(int more = 2) {
    const int64_t target = reads_.load() + more;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (reads_.load() < target) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return true;
  }

 private:
  const Clock::time_point start_ = Clock::now();
  std::atomic<int64_t> offset_ms_{0};
  std::atomic<int64_t> reads_{0};
};

RendezvousOptions withClock(RendezvousOptions o, ManualClock& clock) {
  o.now = [&clock] { return clock.now(); };
  return o;
}

// Waits (bounded) until the open round `generation` holds exactly `ids` (as "0,2").
bool awaitWaiting(comm::Store& store, int64_t generation, const std::string& ids) {
  RendezvousRound observer(store, elastic(1, 1), RoundNode{99, 1, "observer"});
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::string seen;
    for (int64_t id : observer.waiting(generation))
      seen += (seen.empty() ? "" : ",") + std::to_string(id);
    if (seen == ids) return true;
    if (Clock::now() >= deadline) {
      ADD_FAILURE() << "round " << generation << " holds {" << seen << "}, not {" << ids << "}";
      return false;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(RendezvousRound, AFullRoundClosesAtOnceOrderedByNodeId) {
  comm::MemoryStore store;
  RendezvousRound n2(store, elastic(2, 3), node(2, 1));
  RendezvousRound n1(store, elastic(2, 3), node(1, 3));
  RendezvousRound n0(store, elastic(2, 3), node(0, 2));
  const auto t0 = Clock::now();
  auto f2 = std::async(std::launch::async, [&] { return n2.join(0, 0); });
  auto f1 = std::async(std::launch::async, [&] { return n1.join(0, 0); });
  Round r0 = n0.join(0, 4);
  Round r1 = f1.get(), r2 = f2.get();
  EXPECT_LT(secondsSince(t0), 0.25);  // MAX joined: no last call
  for (const Round* r : {&r0, &r1, &r2}) {
    ASSERT_EQ(r->outcome, Round::Outcome::kClosed);
    EXPECT_EQ(r->generation, 0);
    EXPECT_EQ(r->nodeIds(), "0,1,2");  // whatever order they joined in
    EXPECT_EQ(r->worldSize(), 6);
    EXPECT_EQ(r->restarts, 4);  // the host's count
  }
  EXPECT_EQ(r0.firstRankOf(0), 0);
  EXPECT_EQ(r0.firstRankOf(1), 2);  // node 0 has 2 workers
  EXPECT_EQ(r0.firstRankOf(2), 5);  // node 1 has 3
  EXPECT_EQ(r2.nodeRankOf(2), 2);
}

TEST(RendezvousRound, WithAtLeastMinTheRoundClosesAfterTheLastCall) {
  comm::MemoryStore store;
  RendezvousRound n0(store, elastic(2, 4, 400), node(0));
  RendezvousRound n3(store, elastic(2, 4, 400), node(3));
  auto f3 = std::async(std::launch::async, [&] { return n3.join(0, 0); });
  const auto t0 = Clock::now();
  Round r0 = n0.join(0, 0);
  const double took = secondsSince(t0);
  Round r3 = f3.get();
  ASSERT_EQ(r0.outcome, Round::Outcome::kClosed);
  EXPECT_GE(took, 0.38);
  EXPECT_LT(took, 1.5);
  EXPECT_EQ(r0.nodeIds(), "0,3");
  EXPECT_EQ(r3.nodeIds(), "0,3");
  EXPECT_EQ(r3.nodeRankOf(3), 1);  // dense: node id 3 is node rank 1 of this group
  EXPECT_EQ(r3.firstRankOf(3), 2);
  EXPECT_EQ(r3.worldSize(), 4);
}

TEST(RendezvousRound, ANewJoinerRestartsTheLastCall) {
  comm::MemoryStore store;
  ManualClock clock;
  RendezvousRound n0(store, withClock(elastic(1, 3, 400), clock), node(0));
  RendezvousRound n1(store, withClock(elastic(1, 3, 400), clock), node(1));
  auto f0 = std::async(std::launch::async, [&] { return n0.join(0, 0); });
  ASSERT_TRUE(awaitWaiting(store, 0, "0"));
  ASSERT_TRUE(clock.awaitReads());
  clock.advance(milliseconds(250));  // inside node 0's last call
  ASSERT_TRUE(clock.awaitReads());
  auto f1 = std::async(std::launch::async, [&] { return n1.join(0, 0); });
  ASSERT_TRUE(awaitWaiting(store, 0, "0,1"));
  ASSERT_TRUE(clock.awaitReads());
  // 500 ms after node 0 joined but 250 ms after node 1 did: the last call runs again.
  clock.advance(milliseconds(250));
  ASSERT_TRUE(clock.awaitReads());
  EXPECT_TRUE(awaitWaiting(store, 0, "0,1")) << "the round closed during node 1's last call";
  clock.advance(milliseconds(150));  // 400 ms of quiet since node 1 joined
  EXPECT_EQ(f0.get().nodeIds(), "0,1");
  EXPECT_EQ(f1.get().nodeIds(), "0,1");
}

TEST(RendezvousRound, TooFewNodesEndTheRoundWithTheCountAndWho) {
  comm::MemoryStore store;
  RendezvousRound n0(store, elastic(3, 4, 50, 500), node(0));
  RendezvousRound n2(store, elastic(3, 4, 50, 500), node(2));
  auto f2 = std::async(std::launch::async, [&] { return n2.join(1, 0); });
  ASSERT_TRUE(awaitWaiting(store, 1, "2"));  // node 2 first, then the host
  const auto t0 = Clock::now();
  Round r0 = n0.join(1, 0);
  EXPECT_LT(secondsSince(t0), 1.5);
  Round r2 = f2.get();
  const std::string reason =
      "only 2 node(s) joined the rendezvous of generation 1 within --rdzv-timeout 0.5 s (nodes "
      "0,2), fewer than the 3 that --nnodes 3:4 needs";
  for (const Round* r : {&r0, &r2}) {
    ASSERT_EQ(r->outcome, Round::Outcome::kEnded);
    EXPECT_EQ(r->exit_code, 1);  // generation 0 would be a set-up error: 2
    EXPECT_EQ(r->reason, reason);
  }
  // Generation 0: nobody else came; exit code 2 and the fixed count named as such.
  RendezvousRound alone(store, elastic(2, 2, 50, 200), node(0));
  Round r = alone.join(5, 0);
  EXPECT_EQ(r.exit_code, 1);
  comm::MemoryStore fresh;
  RendezvousRound first(fresh, elastic(2, 2, 50, 200), node(0));
  r = first.join(0, 0);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.reason,
            "only 1 node(s) joined the rendezvous of generation 0 within --rdzv-timeout 0.2 s "
            "(nodes 0), fewer than the 2 that --nnodes 2 needs");
}

TEST(RendezvousRound, ALateNodeWaitsInTheNextRoundAndJoinsWhenTheGroupRestarts) {
  comm::MemoryStore store;
  ManualClock clock;
  std::vector<std::string> notes;
  RendezvousRound n0(store, withClock(elastic(1, 3, 100), clock), node(0));
  RendezvousRound n1(store, elastic(1, 3, 100), node(1));
  RendezvousRound n2(store, elastic(1, 3, 100), node(2), {},
                     [&](const std::string& line) { notes.push_back(line); });
  auto f1 = std::async(std::launch::async, [&] { return n1.join(0, 0); });
  auto f0 = std::async(std::launch::async, [&] { return n0.join(0, 0); });
  ASSERT_TRUE(awaitWaiting(store, 0, "0,1"));
  ASSERT_TRUE(clock.awaitReads());
  clock.advance(milliseconds(100));  // the last call passes
  ASSERT_EQ(f0.get().nodeIds(), "0,1");
  ASSERT_EQ(f1.get().nodeIds(), "0,1");
  // Generation 0 runs without node 2: it waits in round 1 however long that takes.
  auto f2 = std::async(std::launch::async, [&] { return n2.join(0, 0); });
  EXPECT_EQ(f2.wait_for(milliseconds(400)), std::future_status::timeout);
  // The group restarts: both members announce they come back, and node 1 is slow to.
  n0.announceRejoin(1);
  n1.announceRejoin(1);
  f0 = std::async(std::launch::async, [&] { return n0.join(1, 1); });
  ASSERT_TRUE(awaitWaiting(store, 1, "0,2"));
  ASSERT_TRUE(clock.awaitReads());
  clock.advance(milliseconds(300));  // three last calls
  ASSERT_TRUE(clock.awaitReads());
  // The host waits for the announced node 1 beyond the last call.
  EXPECT_TRUE(awaitWaiting(store, 1, "0,2")) << "the round closed without the announced node 1";
  auto f1b = std::async(std::launch::async, [&] { return n1.join(1, 0); });
  Round r0 = f0.get();
  EXPECT_EQ(r0.nodeIds(), "0,1,2");
  EXPECT_EQ(r0.generation, 1);
  EXPECT_EQ(f1b.get().nodeIds(), "0,1,2");
  Round r2 = f2.get();
  EXPECT_EQ(r2.generation, 1);
  EXPECT_EQ(r2.restarts, 1);
  EXPECT_EQ(r2.firstRankOf(2), 4);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "the group of generation 0 formed without this node (nodes 0,1); waiting in the "
            "rendezvous of "
            "generation 1");
}

TEST(RendezvousRound, EndReleasesTheNodesWaitingInTheNextRound) {
  comm::MemoryStore store;
  RendezvousRound n0(store, elastic(1, 2, 50), node(0));
  ASSERT_EQ(n0.join(0, 0).nodeIds(), "0");
  RendezvousRound n1(store, elastic(1, 2, 50), node(1));
  auto f1 = std::async(std::launch::async, [&] { return n1.join(0, 0); });
  ASSERT_TRUE(awaitWaiting(store, 1, "1"));  // late for round 0: waits in round 1
  EXPECT_EQ(n0.end(1, 0, "the job finished", milliseconds(2000)), 1);
  Round r1 = f1.get();
  EXPECT_EQ(r1.outcome, Round::Outcome::kEnded);
  EXPECT_EQ(r1.exit_code, 0);
  EXPECT_EQ(r1.reason, "the job finished");
  EXPECT_TRUE(store.tryGet("rdzv/1/ack/1").has_value());
  // A node arriving afterwards learns the same at once.
  RendezvousRound again(store, elastic(1, 2, 50), RoundNode{1, 1, "other"});
  Round r = again.join(0, 0);
  EXPECT_EQ(r.outcome, Round::Outcome::kEnded);
  EXPECT_EQ(r.generation, 1);
}

// A node that died while waiting never reads why the round ended: the host says so and goes on.
TEST(RendezvousRound, EndNotesTheNodesThatNeverReadWhy) {
  comm::MemoryStore store;
  std::vector<std::string> notes;
  RendezvousRound n0(store, elastic(1, 2, 50), node(0), {},
                     [&](const std::string& line) { notes.push_back(line); });
  // Node 1 joined round 1, then died.
  store.set("rdzv/1/state", R"({"state":"open","nodes":[{"id":1,"nproc":1,"nonce":"gone"}]})");
  EXPECT_EQ(n0.end(1, 0, "the job finished", milliseconds(50)), 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("of the 1 node(s) waiting in the rendezvous of generation 1, not all "
                           "confirmed within 0.05 s that they read why it ended: ",
                           0),
            0u)
      << notes[0];
  EXPECT_NE(notes[0].find("keys still missing after 50 ms: 'rdzv/1/ack/1'"), std::string::npos)
      << notes[0];
}

TEST(RendezvousRound, TwoNodesWithOneIdAreAUserError) {
  comm::MemoryStore store;
  RendezvousRound b(store, elastic(2, 3, 5000), RoundNode{1, 1, "b"});
  std::atomic<bool> stop{false};
  RendezvousRound a_stoppable(store, elastic(2, 3), RoundNode{1, 1, "a"},
                              [&] { return stop.load(); });
  auto fa = std::async(std::launch::async, [&] { return a_stoppable.join(0, 0); });
  ASSERT_TRUE(awaitWaiting(store, 0, "1"));
  try {
    b.join(0, 0);
    ADD_FAILURE() << "no error";
  } catch (const RendezvousError& e) {
    EXPECT_STREQ(e.what(),
                 "node 1 already joined the rendezvous of generation 0 from another cumulus-run "
                 "(or from one that died while waiting there): give every node its own "
                 "--node-rank");
  }
  stop = true;
  EXPECT_EQ(fa.get().outcome, Round::Outcome::kInterrupted);
}

TEST(RendezvousRound, ANodeInterruptedWhileWaitingLeavesTheRound) {
  comm::MemoryStore store;
  ManualClock clock;
  std::atomic<bool> stop{false};
  RendezvousRound n0(store, withClock(elastic(1, 3, 300), clock), node(0));
  RendezvousRound n1(store, elastic(1, 3, 300), node(1), [&] { return stop.load(); });
  auto f1 = std::async(std::launch::async, [&] { return n1.join(0, 0); });
  auto f0 = std::async(std::launch::async, [&] { return n0.join(0, 0); });
  ASSERT_TRUE(awaitWaiting(store, 0, "0,1"));  // both in; the host's clock stands still
  stop = true;
  EXPECT_EQ(f1.get().outcome, Round::Outcome::kInterrupted);
  EXPECT_TRUE(awaitWaiting(store, 0, "0"));
  ASSERT_TRUE(clock.awaitReads());     // the host saw node 1 leave
  clock.advance(milliseconds(300));    // the last call passes
  EXPECT_EQ(f0.get().nodeIds(), "0");  // closed without the node that left
}

// The round state is JSON; anything else in its key is refused, naming the key and the field.
TEST(RendezvousRound, MalformedStateNamesTheKeyAndTheField) {
  comm::MemoryStore store;
  RendezvousRound n0(store, elastic(1, 1, 50), node(0));
  auto errorOf = [&](const std::string& state) -> std::string {
    store.set("rdzv/0/state", state);
    try {
      n0.join(0, 0);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(errorOf("open 1:1:x"),
            "malformed rendezvous state rdzv/0/state: not JSON in open 1:1:x");
  EXPECT_EQ(errorOf(R"({"state":"shut","nodes":[]})"),
            "malformed rendezvous state rdzv/0/state: \"state\": expected open, closed or ended "
            "in {\"state\":\"shut\",\"nodes\":[]}");
  EXPECT_EQ(errorOf(R"({"state":"open","nodes":[{"id":1,"nproc":"2","nonce":"x"}]})"),
            "malformed rendezvous state rdzv/0/state: \"nodes[0].nproc\": expected an integer in "
            "{\"state\":\"open\",\"nodes\":[{\"id\":1,\"nproc\":\"2\",\"nonce\":\"x\"}]}");
  EXPECT_EQ(errorOf(R"({"state":"ended","exit_code":1})"),
            "malformed rendezvous state rdzv/0/state: \"reason\": expected a string in "
            "{\"state\":\"ended\",\"exit_code\":1}");
}

}  // namespace
}  // namespace cumulus::launch
