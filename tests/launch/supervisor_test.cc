// The supervision loop's stop watch without processes: the launcher's signal comes first, and
// the notice source is asked at most once per interval, by a clock the test moves.

#include "launch/supervisor.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>

#include "base/clock.h"

namespace cumulus::launch {
namespace {

using namespace std::chrono_literals;

// Answers every poll with `next` and counts the polls.
class ScriptedNotice : public NoticeSource {
 public:
  NoticeEvent poll() override {
    ++polls;
    return next;
  }
  std::string describe() const override { return "a scripted source"; }
  NoticeEvent next;
  int polls = 0;
};

int noSignal() { return 0; }
int interrupted() { return SIGINT; }

TEST(StopWatch, AsksTheNoticeSourceAtMostOncePerInterval) {
  base::FakeClock clock;
  ScriptedNotice notice;
  StopWatch watch(&noSignal, &notice, 500ms, clock);
  EXPECT_EQ(watch.poll().signal, 0);
  EXPECT_EQ(notice.polls, 1);
  clock.advance(499ms);
  EXPECT_EQ(watch.poll().signal, 0);
  EXPECT_EQ(notice.polls, 1);
  clock.advance(1ms);
  watch.poll();
  EXPECT_EQ(notice.polls, 2);
}

TEST(StopWatch, APreemptionNoticeIsASigtermWithItsDetail) {
  base::FakeClock clock;
  ScriptedNotice notice;
  notice.next = {NoticeKind::kPreemption, "spot/instance-action terminate"};
  StopWatch watch(&noSignal, &notice, 500ms, clock);
  const StopWatch::Request request = watch.poll();
  EXPECT_EQ(request.signal, SIGTERM);
  EXPECT_EQ(request.detail, "spot/instance-action terminate");
  EXPECT_EQ(request.rebalance, "");
}

TEST(StopWatch, ARebalanceIsPassedOnWithoutStopping) {
  base::FakeClock clock;
  ScriptedNotice notice;
  notice.next = {NoticeKind::kRebalance, "rebalance recommendation"};
  StopWatch watch(&noSignal, &notice, 500ms, clock);
  const StopWatch::Request request = watch.poll();
  EXPECT_EQ(request.signal, 0);
  EXPECT_EQ(request.rebalance, "rebalance recommendation");
}

TEST(StopWatch, TheLaunchersSignalComesFirstAndSkipsTheSource) {
  base::FakeClock clock;
  ScriptedNotice notice;
  notice.next = {NoticeKind::kPreemption, "ignored"};
  StopWatch watch(&interrupted, &notice, 500ms, clock);
  const StopWatch::Request request = watch.poll();
  EXPECT_EQ(request.signal, SIGINT);
  EXPECT_EQ(request.detail, "");
  EXPECT_EQ(notice.polls, 0);
}

TEST(StopWatch, WithoutANoticeSourceOnlyTheSignalCounts) {
  base::FakeClock clock;
  StopWatch watch(&noSignal, nullptr, 500ms, clock);
  EXPECT_EQ(watch.poll().signal, 0);
  StopWatch stopped(&interrupted, nullptr, 500ms, clock);
  EXPECT_EQ(stopped.poll().signal, SIGINT);
}

}  // namespace
}  // namespace cumulus::launch
