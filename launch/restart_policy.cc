#include "launch/restart_policy.h"

#include <algorithm>

#include "launch/worker_group.h"

namespace cumulus::launch {

bool isPermanentFailure(const ExitStatus& status) {
  return status.exited && status.signal == 0 &&
         (status.exit_code == kExitUsage || status.exit_code == kExitCannotExecute);
}

WorkerExits summarizeExits(const std::vector<ExitStatus>& statuses) {
  WorkerExits out;
  bool permanent = false;  // out.first_failed is a permanent failure
  for (size_t i = 0; i < statuses.size(); ++i) {
    const ExitStatus& s = statuses[i];
    if (!s.exited) {
      out.all_exited = false;
    } else if (s.exit_code == kExitPreempted && s.signal == 0) {
      out.any_preempted = true;
    } else if (!s.ok() && (out.first_failed < 0 || (!permanent && isPermanentFailure(s)))) {
      out.first_failed = static_cast<int>(i);
      permanent = isPermanentFailure(s);
    }
  }
  return out;
}

RestartDecision RestartPolicy::decide(const GroupEnd& end, int restarts) const {
  RestartDecision d;
  switch (end.kind) {
    case GroupEnd::Kind::kExit:
      d.action = RestartDecision::Action::kExit;
      d.exit_code = end.exit_code;
      return d;
    case GroupEnd::Kind::kRegroup:
      d.action = RestartDecision::Action::kRegroup;
      d.what = end.detail;
      return d;
    case GroupEnd::Kind::kStoreLost:
      d.what = "the rendezvous Store is unreachable (" + end.detail + ")";
      return storeLost(d, end.detail);
    case GroupEnd::Kind::kWorkerFailed: {
      const ExitStatus& s = end.failed_status;
      d.what = "rank " + std::to_string(end.failed_rank) + " failed (" + s.describe() + ")";
      d.publish_failure = multi_;
      if (isPermanentFailure(s)) {
        d.action = RestartDecision::Action::kGiveUp;
        d.why = s.exit_code == kExitCannotExecute ? RestartDecision::Why::kCannotExecute
                                                  : RestartDecision::Why::kRepeatable;
        d.exit_code = kExitUsage;
        return d;
      }
      break;
    }
    case GroupEnd::Kind::kRemoteFailure:
      d.what = end.detail + " on another node";
      if (end.permanent) {
        d.action = RestartDecision::Action::kGiveUp;
        d.why = RestartDecision::Why::kOtherNodePermanent;
        d.exit_code = kExitUsage;
        return d;
      }
      if (in_place_) {  // the other node gave up: nothing goes on in place without it
        d.action = RestartDecision::Action::kGiveUp;
        d.why = RestartDecision::Why::kOtherNodeGaveUp;
        d.exit_code = 1;
        return d;
      }
      break;
  }
  // A node loss counts like a crash: each is one restart of the group.
  if (restarts >= max_restarts_) {
    d.action = RestartDecision::Action::kGiveUp;
    d.why = RestartDecision::Why::kNoRestartsLeft;
    d.exit_code = 1;
    return d;
  }
  // A replacement joins the members left; with none, it would wait for a group that is gone.
  const bool replace = in_place_ && end.members_left;
  d.action = replace ? RestartDecision::Action::kReplace : RestartDecision::Action::kRestart;
  if (in_place_ && !replace) {
    d.why = RestartDecision::Why::kNoMembersLeft;
    d.no_members = end.no_members;
  }
  // In place only this node's worker is replaced: the other nodes hear nothing.
  d.publish_failure = d.publish_failure && !replace;
  d.restarts = restarts + 1;
  return d;
}

RestartDecision RestartPolicy::storeLost(RestartDecision decided, const std::string& error) const {
  decided.action = RestartDecision::Action::kGiveUp;
  decided.why = RestartDecision::Why::kStoreLost;
  decided.exit_code = 1;
  decided.restarts = 0;
  decided.store_error = error;
  return decided;
}

std::vector<int64_t> RestartPolicy::toAdmit(const std::vector<int64_t>& group,
                                            const std::vector<int64_t>& waiting) const {
  std::vector<int64_t> admit;
  if (!hasRoom(group.size())) return admit;
  for (int64_t id : waiting) {
    if (!std::binary_search(group.begin(), group.end(), id)) admit.push_back(id);
  }
  return admit;
}

}  // namespace cumulus::launch
