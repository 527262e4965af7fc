// The in-place membership protocol over a MemoryStore, members as threads.

#include "comm/quorum.h"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "comm/error.h"
#include "comm/memory_store.h"
#include "comm/store_keys.h"

namespace cumulus::comm {
namespace {

using std::chrono::milliseconds;

QuorumOptions optionsFor(const std::string& id, milliseconds window = milliseconds(60000)) {
  QuorumOptions o;
  o.generation = 3;
  o.member_id = id;
  o.window = window;
  o.join_timeout = milliseconds(20000);
  o.poll = milliseconds(1);
  return o;
}

// Epoch 0 of `ids` (rank order), closed through start() by every member at once.
QuorumEpoch startAll(MemoryStore& store, const std::vector<std::string>& ids) {
  std::vector<std::future<QuorumEpoch>> started;
  for (size_t r = 0; r < ids.size(); ++r) {
    started.push_back(std::async(std::launch::async, [&, r] {
      Quorum q(store, optionsFor(ids[r]));
      return q.start(static_cast<int>(r), static_cast<int>(ids.size()), milliseconds(10000));
    }));
  }
  std::vector<QuorumEpoch> epochs;
  for (auto& f : started) epochs.push_back(f.get());
  for (const QuorumEpoch& e : epochs) EXPECT_EQ(e.encode(), epochs[0].encode());
  return epochs[0];
}

TEST(Quorum, EpochZeroIsTheLaunchGroupInRankOrder) {
  MemoryStore store;
  const QuorumEpoch e = startAll(store, {"0.0.0", "0.1.0", "1.0.0"});
  EXPECT_EQ(e.members, (std::vector<std::string>{"0.0.0", "0.1.0", "1.0.0"}));
  EXPECT_EQ(e.epoch, 0);
  EXPECT_EQ(e.step, -1);
  EXPECT_EQ(e.source, -1);
  EXPECT_TRUE(e.stale.empty());
  EXPECT_EQ(e.commGeneration(), 3000001u);
  EXPECT_EQ(e.rankOf("1.0.0"), 2);
  EXPECT_EQ(e.rankOf("9.9.9"), -1);
  EXPECT_EQ(store.tryGet(quorumLatestKey(3)), "0");
}

// Member 1.0.0 died (its agent marked it gone); the other two failed at different points of
// step 6: one applied its optimizer step (6 done), one did not (5 done). The survivors keep their
// order, train from step 6, and the one behind takes the state from the one ahead.
TEST(Quorum, SurvivorsReformWithoutAMemberMarkedGone) {
  MemoryStore store;
  const QuorumEpoch first = startAll(store, {"0.0.0", "0.1.0", "1.0.0"});
  Quorum::markGone(store, 3, "1.0.0", "signal 9 (SIGKILL)");
  auto behind = std::async(std::launch::async,
                           [&] { return Quorum(store, optionsFor("0.0.0")).reform(first, 5); });
  auto ahead = std::async(std::launch::async,
                          [&] { return Quorum(store, optionsFor("0.1.0")).reform(first, 6); });
  const QuorumEpoch a = behind.get();
  const QuorumEpoch b = ahead.get();
  EXPECT_EQ(a.encode(), b.encode());
  EXPECT_EQ(a.epoch, 1);
  EXPECT_EQ(a.members, (std::vector<std::string>{"0.0.0", "0.1.0"}));
  EXPECT_EQ(a.step, 6);
  EXPECT_EQ(a.source, 1);
  EXPECT_EQ(a.stale, std::vector<int>{0});
  EXPECT_EQ(a.commGeneration(), 3000002u);
  EXPECT_EQ(store.tryGet(quorumGoneKey(3, "1.0.0")), "signal 9 (SIGKILL)");
}

// Nobody marks a member of a lost host: the window closes the epoch without it. When it comes
// back it is fenced out, joins, and the group's next boundary reform admits it as stale.
TEST(Quorum, AStalledMemberIsLeftOutByTheWindowAndRejoinsAsAJoiner) {
  MemoryStore store;
  const QuorumEpoch first = startAll(store, {"0.0.0", "1.0.0"});
  const QuorumEpoch second = Quorum(store, optionsFor("0.0.0", milliseconds(20))).reform(first, 4);
  EXPECT_EQ(second.members, std::vector<std::string>{"0.0.0"});
  EXPECT_EQ(second.step, 4);
  EXPECT_TRUE(second.stale.empty());

  Quorum late(store, optionsFor("1.0.0"));
  auto rejoined = std::async(std::launch::async, [&] { return late.reform(first, 4); });
  Quorum survivor(store, optionsFor("0.0.0"));
  while (survivor.pendingJoiners(second) == 0) std::this_thread::yield();
  const QuorumEpoch third = survivor.reform(second, 5);
  EXPECT_EQ(rejoined.get().encode(), third.encode());
  EXPECT_EQ(third.epoch, 2);
  EXPECT_EQ(third.members, (std::vector<std::string>{"0.0.0", "1.0.0"}));
  EXPECT_EQ(third.step, 5);
  EXPECT_EQ(third.source, 0);
  EXPECT_EQ(third.stale, std::vector<int>{1});
  EXPECT_EQ(third.admitted, 1);
  EXPECT_EQ(survivor.pendingJoiners(third), 0);
}

// Leavers agreed at a step boundary are not waited for, even with an hour's window.
TEST(Quorum, AgreedLeaversAreNotWaitedFor) {
  MemoryStore store;
  const QuorumEpoch first = startAll(store, {"0.0.0", "1.0.0", "2.0.0"});
  const std::vector<std::string> leaving{"1.0.0"};
  auto a = std::async(std::launch::async, [&] {
    return Quorum(store, optionsFor("0.0.0", milliseconds(3600000))).reform(first, 7, leaving);
  });
  auto b = std::async(std::launch::async, [&] {
    return Quorum(store, optionsFor("2.0.0", milliseconds(3600000))).reform(first, 7, leaving);
  });
  const QuorumEpoch e = a.get();
  EXPECT_EQ(e.encode(), b.get().encode());
  EXPECT_EQ(e.members, (std::vector<std::string>{"0.0.0", "2.0.0"}));
  EXPECT_EQ(e.step, 7);
  EXPECT_EQ(e.source, -1);  // nobody needs the state
  EXPECT_TRUE(e.stale.empty());
}

// Joiners are admitted in id order ("10.0.0" after "2.0.0"), up to max_members; the rest wait.
TEST(Quorum, JoinersAreAdmittedInIdOrderUpToTheMaximum) {
  MemoryStore store;
  const QuorumEpoch first = startAll(store, {"0.0.0"});
  auto join = [&](const std::string& id) {
    return std::async(std::launch::async, [&store, id] {
      QuorumOptions o = optionsFor(id);
      o.join_timeout = milliseconds(500);
      return Quorum(store, o).join().value();
    });
  };
  auto j10 = join("10.0.0");
  auto j2 = join("2.0.0");
  auto j3 = join("3.0.0");
  QuorumOptions host = optionsFor("0.0.0");
  host.max_members = 3;
  Quorum q(store, host);
  while (q.pendingJoiners(first) < 3) std::this_thread::yield();
  const QuorumEpoch e = q.reform(first, 9);
  EXPECT_EQ(e.members.size(), 3u);
  EXPECT_EQ(e.members[0], "0.0.0");
  EXPECT_EQ(e.step, 9);
  EXPECT_EQ(e.stale, (std::vector<int>{1, 2}));
  EXPECT_EQ(q.pendingJoiners(e), 1);
  // Which two got in depends on the order their tickets were taken, but they are in id order.
  EXPECT_LT(std::stoi(e.members[1]), std::stoi(e.members[2])) << e.encode();
  int admitted = 0;
  std::string timed_out;
  for (auto* f : {&j10, &j2, &j3}) {
    try {
      EXPECT_EQ(f->get().encode(), e.encode());
      ++admitted;
    } catch (const CommError& error) {
      EXPECT_EQ(error.kind(), ErrorKind::kTimeout);
      timed_out = error.what();
    }
  }
  EXPECT_EQ(admitted, 2);
  EXPECT_NE(timed_out.find("was not admitted to the group of generation 3 within 500 ms"),
            std::string::npos)
      << timed_out;
}

// A group that finished tells the joiners still waiting, who stop waiting.
TEST(Quorum, AJoinerOfAFinishedGroupStopsWaiting) {
  MemoryStore store;
  const QuorumEpoch first = startAll(store, {"0.0.0"});
  Quorum joiner(store, optionsFor("1.0.0"));
  auto joined = std::async(std::launch::async, [&] { return joiner.join(); });
  Quorum member(store, optionsFor("0.0.0"));
  while (member.pendingJoiners(first) == 0) std::this_thread::yield();
  member.finish(48);
  EXPECT_FALSE(joined.get().has_value());
  EXPECT_EQ(store.tryGet(quorumFinishedKey(3)), "48");
}

// Before the first step (heal_everyone): every member reports the same steps, but the start-up's
// collectives may have run on some and not on others, so all but one take that one's state.
TEST(Quorum, AReformBeforeTheFirstStepHealsEveryoneFromOne) {
  MemoryStore store;
  const QuorumEpoch first = startAll(store, {"0.0.0", "0.1.0", "0.2.0"});
  Quorum::markGone(store, 3, "0.1.0", "signal 9 (SIGKILL)");
  auto a = std::async(std::launch::async, [&] {
    return Quorum(store, optionsFor("0.0.0")).reform(first, 0, {}, /*heal_everyone=*/true);
  });
  auto b = std::async(std::launch::async, [&] {
    return Quorum(store, optionsFor("0.2.0")).reform(first, 0, {}, /*heal_everyone=*/true);
  });
  const QuorumEpoch e = a.get();
  EXPECT_EQ(e.encode(), b.get().encode());
  EXPECT_EQ(e.members, (std::vector<std::string>{"0.0.0", "0.2.0"}));
  EXPECT_EQ(e.step, 0);
  EXPECT_EQ(e.source, 0);
  EXPECT_EQ(e.stale, std::vector<int>{1});
}

// What an agent asks before it starts a replacement: nothing before epoch 0 closed (no group to
// join), then the newest epoch's members not marked gone, and none once all are gone.
TEST(Quorum, LiveMembersAreTheNewestEpochsNotMarkedGone) {
  MemoryStore store;
  EXPECT_FALSE(Quorum::liveMembers(store, 3).has_value());
  const QuorumEpoch first = startAll(store, {"0.0.0", "0.1.0"});
  EXPECT_EQ(Quorum::liveMembers(store, 3), (std::vector<std::string>{"0.0.0", "0.1.0"}));
  Quorum::markGone(store, 3, "0.1.0", "signal 9 (SIGKILL)");
  const QuorumEpoch second = Quorum(store, optionsFor("0.0.0")).reform(first, 4);
  EXPECT_EQ(second.members, std::vector<std::string>{"0.0.0"});
  store.set(quorumLatestKey(3), "0");  // an agent that reads between the record and the latest key
  EXPECT_EQ(Quorum::liveMembers(store, 3), std::vector<std::string>{"0.0.0"});
  Quorum::markGone(store, 3, "0.0.0", "exit code 1");
  EXPECT_EQ(Quorum::liveMembers(store, 3), std::vector<std::string>{});
}

// A replacement waiting to join a group whose every member is gone stops waiting within a second
// and says why, rather than waiting out its admission deadline (20 s here).
TEST(Quorum, AJoinerWithNoMemberLeftToAdmitItStopsAtOnce) {
  MemoryStore store;
  startAll(store, {"0.0.0", "0.1.0"});
  Quorum::markGone(store, 3, "0.0.0", "exit code 1");
  Quorum::markGone(store, 3, "0.1.0", "exit code 1");
  const auto started = std::chrono::steady_clock::now();
  try {
    Quorum(store, optionsFor("0.1.1")).join();
    FAIL() << "admitted";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRendezvous);
    EXPECT_NE(std::string(e.what()).find(
                  "member 0.1.1 cannot join the group of generation 3: every member of its newest "
                  "epoch is gone, so no member holds the training state; the launcher restarts "
                  "the group from its newest checkpoint"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, milliseconds(10000));
}

TEST(Quorum, AMalformedRecordIsATypedErrorNamingTheKey) {
  try {
    QuorumEpoch::decode("{\"members\":[]", 3, 2);
    FAIL() << "decoded";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFrame);
    EXPECT_NE(std::string(e.what()).find("quorum/3/2/record: not a membership record"),
              std::string::npos)
        << e.what();
  }
  try {
    QuorumEpoch::decode(R"({"members":["a"],"step":3,"source":4,"stale":[0],"admitted":0})", 3, 2);
    FAIL() << "decoded";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("quorum/3/2/record: inconsistent membership record"),
              std::string::npos)
        << e.what();
  }
}

TEST(Quorum, ARankThatNeverSeesEpochZeroTimesOut) {
  MemoryStore store;
  Quorum q(store, optionsFor("0.1.0"));
  try {
    q.start(1, 2, milliseconds(30));
    FAIL() << "started";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_NE(std::string(e.what()).find("epoch 0 of generation 3 did not close in time"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cumulus::comm
