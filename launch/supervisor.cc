#include "launch/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <set>

#include "comm/error.h"

namespace cumulus::launch {

StopWatch::Request StopWatch::poll() {
  Request request;
  request.signal = stop_signal_();
  if (request.signal || !notice_) return request;
  const base::Clock::TimePoint now = clock_.now();
  if (next_poll_ && now < *next_poll_) return request;
  next_poll_ = now + interval_;
  const NoticeEvent event = notice_->poll();
  if (event.kind == NoticeKind::kPreemption) {
    request.signal = SIGTERM;
    request.detail = event.detail;
  } else if (event.kind == NoticeKind::kRebalance) {
    request.rebalance = event.detail;
  }
  return request;
}

GroupEnd Supervisor::run(WorkerGroup& group) {
  const int interval_ms = std::max(1, static_cast<int>(options_.monitor_interval * 1000));
  StopWatch stops(stop_signal_, job_.notice.get(),
                  std::chrono::milliseconds(std::max(interval_ms, 500)), clock_);
  base::Clock::TimePoint next_store_check = clock_.now();
  for (;;) {
    group.mux.pump(interval_ms);
    const StopWatch::Request stop = stops.poll();
    if (!stop.rebalance.empty()) {
      // A softer, earlier signal: the workers agree on a step, checkpoint it and go on
      // (<cumulus/preemption.h>). SIGUSR1 stays blocked in a worker that does not ask for it.
      console_.rebalance(stop.rebalance);
      for (auto& w : group.workers) {
        if (!w.process->poll().exited) w.process->signal(SIGUSR1);
      }
    }
    if (stop.signal == SIGTERM) return stopForPreemption(group, stop.detail);
    if (stop.signal) return stopForSignal(group, stop.signal);

    const std::vector<ExitStatus> statuses = group.poll();
    const WorkerExits exits = summarizeExits(statuses);
    if (exits.first_failed >= 0) {
      GroupEnd end;
      end.kind = GroupEnd::Kind::kWorkerFailed;
      end.failed_rank = group.workers[static_cast<size_t>(exits.first_failed)].rank;
      end.failed_status = statuses[static_cast<size_t>(exits.first_failed)];
      end.members_left = !exits.all_exited || group.joining || group.node_ids.size() > 1;
      if (options_.recovery == Recovery::kInPlace) checkMembersLeft(group, statuses, end);
      return end;
    }
    if (exits.all_exited) return finish(group, exits.any_preempted);

    if (job_.multi && clock_.now() >= next_store_check) {
      next_store_check = clock_.now() + std::chrono::milliseconds(200);
      if (std::optional<GroupEnd> end = checkStore(group)) return *end;
    }
  }
}

// In place, the Store's membership says better than this node's processes whether a replacement
// has anyone to join: a running worker may be a replacement still waiting, another node's workers
// may all be gone. A Store that does not answer leaves the local answer (its loss shows soon).
void Supervisor::checkMembersLeft(WorkerGroup& group, const std::vector<ExitStatus>& statuses,
                                  GroupEnd& end) {
  std::optional<std::vector<std::string>> live;
  try {
    live = job_.group_store->liveMembers(group.generation);
  } catch (const cumulus::CommError&) {
    return;
  }
  if (!live) {
    end.members_left = false;
    end.no_members = "the group had not formed yet (its first membership never closed)";
    return;
  }
  std::set<std::string> exited;  // not marked gone yet
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (statuses[i].exited) exited.insert(group.workers[i].member_id);
  }
  for (const std::string& member : *live) {
    if (exited.count(member) == 0) return;
  }
  end.members_left = false;
  end.no_members = "no member of the group holds the training state any more";
}

GroupEnd Supervisor::stopForPreemption(WorkerGroup& group, const std::string& notice) {
  // A spot notice: the workers agree on a stop step, checkpoint there and exit 75.
  const double grace = options_.preemption_grace;
  console_.preemptionNotice(notice, grace);
  const base::Clock::TimePoint t0 = clock_.now();
  stopWorkers(group.workers, group.mux, grace);
  const double took = std::chrono::duration<double>(clock_.now() - t0).count();
  GroupEnd end;
  end.exit_code = reportPreemption(group.workers, group.mux, console_, took, grace);
  end.detail = "preempted";
  if (options_.recovery == Recovery::kInPlace) {
    leaveInPlace(group);
  } else if (job_.multi) {
    // The whole group stopped: node 0 keeps the Store up until every node says it is done, and
    // this node is (without this, node 0 waits out --rdzv-timeout before it exits 75).
    try {
      job_.group_store->markDone(group.generation, options_.node_rank);
    } catch (const cumulus::CommError& e) {
      console_.finishUnconfirmed(group.generation, e.what());
    }
  }
  return end;
}

void Supervisor::leaveInPlace(WorkerGroup& group) {
  // The other nodes go on: a worker that did not leave by itself (killed at the grace) is marked
  // gone so that they need not wait for it, and node 0 need not wait for this node at the end.
  for (const Worker& w : group.workers) {
    const ExitStatus& s = w.process->poll();
    if (s.ok() || (s.signal == 0 && s.exit_code == kExitPreempted)) continue;
    try {
      job_.group_store->markGone(group.generation, w.member_id, s.describe());
    } catch (const cumulus::CommError& e) {
      console_.markGoneFailed(w.member_id, e.what());
    }
  }
  if (!job_.multi) return;
  try {
    job_.group_store->markDone(group.generation, options_.node_rank);
  } catch (const cumulus::CommError& e) {
    console_.finishUnconfirmed(group.generation, e.what());
  }
}

GroupEnd Supervisor::stopForSignal(WorkerGroup& group, int sig) {
  console_.stoppingOnSignal(sig);
  stopWorkers(group.workers, group.mux, options_.stop_grace);
  GroupEnd end;
  end.exit_code = 128 + sig;
  end.detail = "node 0's launcher was stopped by " + signalName(sig);
  return end;
}

GroupEnd Supervisor::finish(WorkerGroup& group, bool any_preempted) {
  GroupEnd end;
  // Workers that stopped at an agreed step because node 0 re-forms the group (its workers got
  // SIGTERM and told ours) are not a preemption of the job.
  if (any_preempted && job_.multi) {
    try {
      if (auto why = job_.group_store->regroup(group.generation)) {
        end.kind = GroupEnd::Kind::kRegroup;
        end.detail = *why;
        return end;
      }
    } catch (const cumulus::CommError& e) {
      // Without the Store there is no regroup to join: the stop is the job's preemption.
      console_.regroupUnreadable(e.what());
    }
  }
  for (auto& w : group.workers) group.mux.finish(w.rank);
  if (any_preempted) {
    // A worker got the notice itself (SIGTERM from the cloud) and the group agreed to stop.
    end.exit_code =
        reportPreemption(group.workers, group.mux, console_, 0.0, options_.preemption_grace);
  } else {
    console_.allFinished(options_.nproc_per_node);
  }
  if (job_.multi) {
    job_.group_store->markDone(group.generation, options_.node_rank);
    if (job_.host) {  // keep the Store up until every node is done with it
      try {
        std::vector<int64_t> nodes = group.node_ids;
        if (options_.recovery == Recovery::kInPlace) {  // and the nodes that joined it late
          for (int64_t id : job_.group_store->joined(group.generation)) nodes.push_back(id);
        }
        job_.group_store->waitDone(group.generation, nodes, toMs(options_.rdzv_timeout));
      } catch (const cumulus::CommError& e) {
        // Best effort: this node is done; a node that never says so is gone.
        console_.finishUnconfirmed(group.generation, e.what());
      }
    }
  }
  end.detail = end.exit_code == 0 ? "finished" : "preempted";
  return end;
}

std::optional<GroupEnd> Supervisor::checkStore(WorkerGroup& group) {
  // Node 0 gone (its agent gave up, or the host was lost) takes the Store with it: that is a
  // failure of the group too, not a reason for this agent to die with a Store error.
  GroupEnd end;
  try {
    if (auto failure = job_.group_store->failure(group.generation)) {
      end.kind = GroupEnd::Kind::kRemoteFailure;
      end.detail = failure->what;
      end.permanent = failure->permanent;
      return end;
    }
    // Nodes that arrived after this group formed wait in the next round: the host re-forms the
    // group to admit them (torchrun's num_nodes_waiting).
    // With recovery in place they joined the running group instead.
    if (job_.host && options_.recovery == Recovery::kRestart &&
        policy_.hasRoom(group.node_ids.size())) {
      const std::vector<int64_t> admit =
          policy_.toAdmit(group.node_ids, job_.rdzv->waiting(group.generation + 1));
      if (!admit.empty()) {
        job_.group_store->proposeRegroup(group.generation,
                                         "node(s) " + joinIds(admit) + " waiting to join");
      }
    }
    if (auto why = job_.group_store->regroup(group.generation)) {
      end.kind = GroupEnd::Kind::kRegroup;
      end.detail = *why;
      return end;
    }
  } catch (const cumulus::CommError& e) {
    end.kind = GroupEnd::Kind::kStoreLost;
    end.detail = e.what();
    return end;
  }
  return std::nullopt;
}

}  // namespace cumulus::launch
