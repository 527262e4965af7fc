// The restart policy without processes: every way a group can end, against the budget of
// restarts, and the console lines the launcher prints for the decision.

#include "launch/restart_policy.h"

#include <signal.h>
#include <stdio.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "launch/agent_console.h"
#include "tests/launch/console_capture.h"

namespace cumulus::launch {
namespace {

using Action = RestartDecision::Action;
using Why = RestartDecision::Why;

ExitStatus exited(int code) {
  ExitStatus s;
  s.exited = true;
  s.exit_code = code;
  return s;
}

ExitStatus killed(int sig) {
  ExitStatus s;
  s.exited = true;
  s.exit_code = -1;
  s.signal = sig;
  return s;
}

ExitStatus running() { return ExitStatus{}; }

GroupEnd workerFailed(int rank, ExitStatus status) {
  GroupEnd end;
  end.kind = GroupEnd::Kind::kWorkerFailed;
  end.failed_rank = rank;
  end.failed_status = status;
  return end;
}

GroupEnd withDetail(GroupEnd::Kind kind, const std::string& detail) {
  GroupEnd end;
  end.kind = kind;
  end.detail = detail;
  return end;
}

GroupEnd exitWith(int code, const std::string& detail) {
  GroupEnd end = withDetail(GroupEnd::Kind::kExit, detail);
  end.exit_code = code;
  return end;
}

struct Case {
  const char* name;
  GroupEnd end;
  bool multi;
  int64_t max_restarts;
  int restarts;  // so far
  // The decision.
  Action action;
  Why why;
  int exit_code;
  int restarts_after;  // kRestart
  std::string what;
  bool publish_failure;
};

std::vector<Case> cases() {
  return {
      {"finished", exitWith(0, "finished"), false, 3, 0, Action::kExit, Why::kNone, 0, 0, "",
       false},
      {"preempted", exitWith(75, "preempted"), true, 3, 1, Action::kExit, Why::kNone, 75, 0, "",
       false},
      {"stopped by SIGINT", exitWith(130, "node 0's launcher was stopped by SIGINT"), true, 0, 0,
       Action::kExit, Why::kNone, 130, 0, "", false},
      // Re-forming the group is never a restart, even with none left.
      {"regroup", withDetail(GroupEnd::Kind::kRegroup, "node(s) 2 waiting to join"), true, 0, 0,
       Action::kRegroup, Why::kNone, 0, 0, "node(s) 2 waiting to join", false},
      {"crash, restarts left", workerFailed(1, exited(3)), false, 3, 0, Action::kRestart,
       Why::kNone, 0, 1, "rank 1 failed (exit code 3)", false},
      {"crash on one of several nodes", workerFailed(5, exited(1)), true, 3, 2, Action::kRestart,
       Why::kNone, 0, 3, "rank 5 failed (exit code 1)", true},
      {"crash, no restarts left", workerFailed(1, exited(7)), false, 1, 1, Action::kGiveUp,
       Why::kNoRestartsLeft, 1, 0, "rank 1 failed (exit code 7)", false},
      {"killed, --max-restarts 0", workerFailed(0, killed(SIGKILL)), true, 0, 0, Action::kGiveUp,
       Why::kNoRestartsLeft, 1, 0, "rank 0 failed (signal SIGKILL)", true},
      // Exit code 2 is a usage error: repeated by any restart, so never restarted.
      {"usage error", workerFailed(1, exited(2)), false, 3, 0, Action::kGiveUp, Why::kRepeatable, 2,
       0, "rank 1 failed (exit code 2)", false},
      {"usage error on one of several nodes", workerFailed(3, exited(2)), true, 3, 0,
       Action::kGiveUp, Why::kRepeatable, 2, 0, "rank 3 failed (exit code 2)", true},
      // Exit code 127: the command cannot be executed; no restart makes it executable.
      {"command cannot be executed", workerFailed(0, exited(127)), false, 3, 0, Action::kGiveUp,
       Why::kCannotExecute, 2, 0, "rank 0 failed (exit code 127)", false},
      // A signal numbered 2 (SIGINT) is not exit code 2.
      {"killed by SIGINT", workerFailed(1, killed(SIGINT)), false, 3, 0, Action::kRestart,
       Why::kNone, 0, 1, "rank 1 failed (signal SIGINT)", false},
      {"another node's crash",
       withDetail(GroupEnd::Kind::kRemoteFailure, "rank 2 failed (exit code 3)"), true, 2, 1,
       Action::kRestart, Why::kNone, 0, 2, "rank 2 failed (exit code 3) on another node", false},
      {"another node's crash, no restarts left",
       withDetail(GroupEnd::Kind::kRemoteFailure, "rank 2 failed (exit code 3)"), true, 2, 2,
       Action::kGiveUp, Why::kNoRestartsLeft, 1, 0, "rank 2 failed (exit code 3) on another node",
       false},
      {"Store lost", withDetail(GroupEnd::Kind::kStoreLost, "store 127.0.0.1:1 unreachable"), true,
       3, 0, Action::kGiveUp, Why::kStoreLost, 1, 0,
       "the rendezvous Store is unreachable (store 127.0.0.1:1 unreachable)", false},
  };
}

TEST(RestartPolicy, DecidesEveryWayAGroupEnds) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const RestartPolicy policy(c.max_restarts, /*max_nodes=*/4, c.multi);
    const RestartDecision d = policy.decide(c.end, c.restarts);
    EXPECT_EQ(d.action, c.action);
    EXPECT_EQ(d.why, c.why);
    EXPECT_EQ(d.exit_code, c.exit_code);
    if (c.action == Action::kRestart) {
      EXPECT_EQ(d.restarts, c.restarts_after);
    }
    EXPECT_EQ(d.what, c.what);
    EXPECT_EQ(d.publish_failure, c.publish_failure);
    EXPECT_EQ(d.store_error, c.why == Why::kStoreLost ? c.end.detail : "");
  }
}

// Losing the Store while acting on a decision (telling the others, announcing this node) ends the
// job with exit code 1 whatever was decided, keeping what failed for the console.
TEST(RestartPolicy, StoreLostWhileActingGivesUpWithCodeOne) {
  const RestartPolicy policy(3, 2, true);
  for (const GroupEnd& end : {workerFailed(1, exited(3)), workerFailed(1, exited(2))}) {
    const RestartDecision d = policy.storeLost(policy.decide(end, 0), "deadline exceeded");
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.why, Why::kStoreLost);
    EXPECT_EQ(d.exit_code, 1);
    EXPECT_EQ(d.store_error, "deadline exceeded");
    EXPECT_EQ(d.what, "rank 1 failed (" + end.failed_status.describe() + ")");
  }
}

TEST(RestartPolicy, AdmitsWaitingNodesOnlyWhileTheGroupHasRoom) {
  const RestartPolicy policy(0, /*max_nodes=*/3, true);
  EXPECT_TRUE(policy.hasRoom(2));
  EXPECT_FALSE(policy.hasRoom(3));
  EXPECT_EQ(policy.toAdmit({0, 1}, {2}), (std::vector<int64_t>{2}));
  // A node id already in the group (a duplicate --node-rank, a host back before its loss was
  // noticed) is left to the next restart.
  EXPECT_EQ(policy.toAdmit({0, 1}, {1, 2}), (std::vector<int64_t>{2}));
  EXPECT_EQ(policy.toAdmit({0, 1}, {1}), std::vector<int64_t>{});
  EXPECT_EQ(policy.toAdmit({0, 1}, {}), std::vector<int64_t>{});
  EXPECT_EQ(policy.toAdmit({0, 1, 2}, {3}), std::vector<int64_t>{});
}

TEST(WorkerExits, ReadsHowTheWorkersStand) {
  WorkerExits e = summarizeExits({exited(0), running()});
  EXPECT_FALSE(e.all_exited);
  EXPECT_FALSE(e.any_preempted);
  EXPECT_EQ(e.first_failed, -1);

  e = summarizeExits({exited(0), exited(75)});
  EXPECT_TRUE(e.all_exited);
  EXPECT_TRUE(e.any_preempted);
  EXPECT_EQ(e.first_failed, -1);

  // A failure counts while others still run; the first in local rank order is named.
  e = summarizeExits({running(), exited(3), killed(SIGKILL)});
  EXPECT_FALSE(e.all_exited);
  EXPECT_EQ(e.first_failed, 1);

  // A permanent failure decides over a transient one seen with it, whatever their order.
  e = summarizeExits({exited(1), killed(SIGKILL), exited(2), exited(127)});
  EXPECT_EQ(e.first_failed, 2);
  e = summarizeExits({killed(SIGKILL), exited(127), exited(2)});
  EXPECT_EQ(e.first_failed, 1);

  // Killed by signal 75 is not an agreed preemption stop.
  e = summarizeExits({killed(75)});
  EXPECT_FALSE(e.any_preempted);
  EXPECT_EQ(e.first_failed, 0);
}

// Recovery in place: this node's failed worker is replaced while restarts are left (the others
// hear nothing); with none left, or a usage error, the job gives up as with restarts, telling the
// others; another node's recorded failure means it gave up, which ends the job here too.
TEST(RestartPolicy, InPlaceReplacesTheWorkerWhileRestartsAreLeft) {
  const RestartPolicy policy(/*max_restarts=*/2, /*max_nodes=*/2, /*multi=*/true,
                             /*in_place=*/true);
  RestartDecision d = policy.decide(workerFailed(3, killed(SIGKILL)), 1);
  EXPECT_EQ(d.action, Action::kReplace);
  EXPECT_EQ(d.restarts, 2);
  EXPECT_FALSE(d.publish_failure);
  EXPECT_EQ(d.what, "rank 3 failed (signal SIGKILL)");

  d = policy.decide(workerFailed(3, exited(1)), 2);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.why, Why::kNoRestartsLeft);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_TRUE(d.publish_failure);

  d = policy.decide(workerFailed(3, exited(2)), 0);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.why, Why::kRepeatable);
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_TRUE(d.publish_failure);

  d = policy.decide(withDetail(GroupEnd::Kind::kRemoteFailure, "rank 1 failed (exit code 7)"), 0);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.why, Why::kOtherNodeGaveUp);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_FALSE(d.publish_failure);
  EXPECT_EQ(printed([&](AgentConsole& c) { c.givingUp(d, 2, "/logs/errors.jsonl"); }),
            "cumulus-run: giving up: rank 1 failed (exit code 7) on another node, and that node "
            "gave up; see /logs/errors.jsonl\n");
  EXPECT_EQ(printed([](AgentConsole& c) {
              c.workerReplaced(2, "0.2.0", "signal SIGKILL", "0.2.1", 1, 3);
            }),
            "cumulus-run: rank 2 (member 0.2.0) died (signal SIGKILL); the group goes on without "
            "it; starting a replacement (member 0.2.1), restart 1 of 3\n");
  // A preemption and a finish are the same as with restarts.
  EXPECT_EQ(policy.decide(exitWith(75, "preempted"), 0).action, Action::kExit);
}

GroupEnd lastMemberFailed(int rank, ExitStatus status) {
  GroupEnd end = workerFailed(rank, status);
  end.members_left = false;
  return end;
}

// Recovery in place: a permanent failure (exit code 2: a diverged loss, an exception from the
// model; 127: a command that cannot be executed) starts no replacement, which would fail the
// same way: the job ends with exit code 2, whatever restarts are left.
TEST(RestartPolicy, InPlaceNeverReplacesAPermanentFailure) {
  const RestartPolicy policy(/*max_restarts=*/3, /*max_nodes=*/1, /*multi=*/false,
                             /*in_place=*/true);
  for (const GroupEnd& end : {workerFailed(1, exited(2)), lastMemberFailed(1, exited(2))}) {
    const RestartDecision d = policy.decide(end, 0);
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.why, Why::kRepeatable);
    EXPECT_EQ(d.exit_code, 2);
    EXPECT_EQ(d.what, "rank 1 failed (exit code 2)");
  }
  const RestartDecision d = policy.decide(workerFailed(0, exited(127)), 0);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.why, Why::kCannotExecute);
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_EQ(d.what, "rank 0 failed (exit code 127)");
}

// Recovery in place with no member of the group left: a replacement would wait for a group that
// is gone, so the group restarts (from the newest checkpoint) instead, counted as a restart.
TEST(RestartPolicy, InPlaceRestartsTheGroupWhenNoMemberIsLeft) {
  const RestartPolicy policy(/*max_restarts=*/3, /*max_nodes=*/1, /*multi=*/false,
                             /*in_place=*/true);
  RestartDecision d = policy.decide(lastMemberFailed(1, exited(1)), 1);
  EXPECT_EQ(d.action, Action::kRestart);
  EXPECT_EQ(d.why, Why::kNoMembersLeft);
  EXPECT_EQ(d.restarts, 2);
  EXPECT_EQ(d.what, "rank 1 failed (exit code 1)");
  EXPECT_EQ(printed([&](AgentConsole& c) { c.noMembersLeft(d.what, d.no_members); }),
            "cumulus-run: rank 1 failed (exit code 1), and no member of the group is left to go "
            "on in place; stopping the group to restart it\n");
  // The Store's reason, when it gave one, is what the line says.
  GroupEnd none = workerFailed(1, exited(1));
  none.members_left = false;
  none.no_members = "no member of the group holds the training state any more";
  d = policy.decide(none, 1);
  EXPECT_EQ(d.action, Action::kRestart);
  EXPECT_EQ(printed([&](AgentConsole& c) { c.noMembersLeft(d.what, d.no_members); }),
            "cumulus-run: rank 1 failed (exit code 1), and no member of the group holds the "
            "training state any more; stopping the group to restart it\n");
  // With none left it gives up as ever.
  d = policy.decide(lastMemberFailed(1, killed(SIGKILL)), 3);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.why, Why::kNoRestartsLeft);
  EXPECT_EQ(d.exit_code, 1);
  // With members left, the failed one is replaced.
  EXPECT_EQ(policy.decide(workerFailed(1, exited(1)), 1).action, Action::kReplace);
}

// Another node's worker failed permanently: a restart would repeat it on that node, so every
// node gives up with exit code 2, in place or not.
TEST(RestartPolicy, AnotherNodesPermanentFailureEndsTheJobEverywhere) {
  GroupEnd end = withDetail(GroupEnd::Kind::kRemoteFailure, "rank 3 failed (exit code 2)");
  end.permanent = true;
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "restart");
    const RestartPolicy policy(3, 2, /*multi=*/true, in_place);
    const RestartDecision d = policy.decide(end, 0);
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.why, Why::kOtherNodePermanent);
    EXPECT_EQ(d.exit_code, 2);
    EXPECT_FALSE(d.publish_failure);
    EXPECT_EQ(printed([&](AgentConsole& c) { c.givingUp(d, 3, "/logs/errors.jsonl"); }),
              "cumulus-run: giving up: rank 3 failed (exit code 2) on another node, an error "
              "that a restart would repeat; that node's launcher names it\n");
  }
}

TEST(RestartPolicy, APermanentFailureEndsWithTheWorkersOwnError) {
  const RestartPolicy policy(3, 1, false, /*in_place=*/true);
  EXPECT_EQ(printed([&](AgentConsole& c) {
              c.givingUp(policy.decide(workerFailed(1, exited(2)), 0), 3, "/logs/gen0/rank1.log",
                         "cumulus-train: error: training diverged at step 3 (loss nan); lower "
                         "optimizer.lr or set trainer.grad_clip_norm");
            }),
            "cumulus-run: giving up: rank 1 failed (exit code 2), an error that a restart would "
            "repeat, so none was tried: cumulus-train: error: training diverged at step 3 (loss "
            "nan); lower optimizer.lr or set trainer.grad_clip_norm (see /logs/gen0/rank1.log)\n");
  EXPECT_EQ(printed([&](AgentConsole& c) {
              c.givingUp(policy.decide(workerFailed(0, exited(127)), 0), 3, "/logs/gen0/rank0.log",
                         "cumulus-run: cannot execute /no/such/worker: No such file or directory");
            }),
            "cumulus-run: giving up: rank 0 failed (exit code 127): cannot execute "
            "/no/such/worker: No such file or directory; fix the command and launch again (see "
            "/logs/gen0/rank0.log)\n");
  // A script that exits 127 on a command it runs prints no line of ours.
  EXPECT_EQ(printed([&](AgentConsole& c) {
              c.givingUp(policy.decide(workerFailed(0, exited(127)), 0), 3, "/logs/gen0/rank0.log");
            }),
            "cumulus-run: giving up: rank 0 failed (exit code 127): the command, or a program it "
            "runs, cannot be executed (not found, or not executable); fix the command and launch "
            "again (see /logs/gen0/rank0.log)\n");
}

TEST(RestartPolicy, ConsoleLinesForEachDecision) {
  EXPECT_EQ(printed([](AgentConsole& c) {
              const RestartPolicy policy(1, 1, false);
              c.givingUp(policy.decide(workerFailed(1, exited(7)), 1), 1, "/logs/gen1/rank1.log");
            }),
            "cumulus-run: giving up: rank 1 failed (exit code 7) and no restarts are left "
            "(--max-restarts 1); see /logs/gen1/rank1.log\n");
  EXPECT_EQ(printed([](AgentConsole& c) {
              const RestartPolicy policy(3, 1, false);
              c.givingUp(policy.decide(workerFailed(1, exited(2)), 0), 3, "/logs/gen0/rank1.log");
            }),
            "cumulus-run: giving up: rank 1 failed (exit code 2), an error in the command or the "
            "experiment that a restart would repeat; fix it and launch again (see "
            "/logs/gen0/rank1.log)\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.storeLost("10.0.0.1:29500", "connection refused"); }),
            "cumulus-run: giving up: the rendezvous Store on node 0 (10.0.0.1:29500) is "
            "unreachable: connection refused; node 0 hosts the Store, so the job cannot go on "
            "without it: launch it again on every node to resume from the newest checkpoint\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.stoppingGroup("rank 1 failed (exit code 3)"); }),
            "cumulus-run: rank 1 failed (exit code 3); stopping the group\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.restarting(1, 3); }),
            "cumulus-run: restarting the group (restart 1 of 3)\n");
  EXPECT_EQ(printed([](AgentConsole& c) { c.regrouping("node(s) 2 waiting to join", 30.0); }),
            "cumulus-run: node(s) 2 waiting to join: the workers checkpoint and stop (as for a "
            "preemption, within --preemption-grace 30.0 s), then the group forms again; not "
            "counted as a restart\n");
}

}  // namespace
}  // namespace cumulus::launch
