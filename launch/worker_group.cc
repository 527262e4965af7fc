#include "launch/worker_group.h"

#include <signal.h>

#include <chrono>

namespace cumulus::launch {

const Worker* WorkerGroup::byRank(int rank) const {
  for (const Worker& w : workers) {
    if (w.rank == rank) return &w;
  }
  return nullptr;
}

std::vector<ExitStatus> WorkerGroup::poll() {
  std::vector<ExitStatus> statuses;
  for (Worker& w : workers) statuses.push_back(w.process->poll());
  return statuses;
}

void stopWorkers(std::vector<Worker>& workers, OutputMux& mux, double grace) {
  for (auto& w : workers) w.process->signal(SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
  for (;;) {
    bool all = true;
    for (auto& w : workers) all &= w.process->poll().exited;
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    mux.pump(10);
  }
  killWorkers(workers, mux);
}

void killWorkers(std::vector<Worker>& workers, OutputMux& mux) {
  for (auto& w : workers) w.process->signal(SIGKILL);
  for (auto& w : workers) {
    w.process->waitFor(5.0);
    mux.finish(w.rank);
  }
}

std::string lastErrorLine(const OutputMux& mux, int rank) {
  const std::string error = mux.lastMarkedLine(rank, kErrorMarker);
  return error.empty() ? mux.lastMarkedLine(rank, kCannotExecuteMarker) : error;
}

int reportPreemption(std::vector<Worker>& workers, OutputMux& mux, AgentConsole& console,
                     double seconds, double grace) {
  bool all_checkpointed = true;
  bool all_finished = true;
  bool all_done = true;  // each finished or checkpointed
  bool killed_at_deadline = false;
  const Worker* first_other = nullptr;  // the first worker that neither checkpointed nor finished
  std::string stopped;                  // "1, 3": the ranks that exited kExitPreempted
  int64_t finished = 0;
  for (auto& w : workers) {
    const ExitStatus& s = w.process->poll();
    const bool checkpointed = s.signal == 0 && s.exit_code == kExitPreempted;
    all_checkpointed &= checkpointed;
    all_finished &= s.ok();
    all_done &= s.ok() || checkpointed;
    killed_at_deadline |= s.signal == SIGKILL;
    if (!checkpointed && !s.ok() && first_other == nullptr) first_other = &w;
    if (checkpointed) stopped += (stopped.empty() ? "" : ", ") + std::to_string(w.rank);
    if (s.ok()) ++finished;
  }
  std::string line;
  for (auto& w : workers) {
    if (line.empty()) line = mux.lastMarkedLine(w.rank, kPreemptedMarker);
  }
  if (all_finished) {
    console.finishedBeforePreemption();
    return 0;
  }
  if (all_done && !all_checkpointed) {
    // Some workers stopped at a notice of their own and the others trained to the end: in place,
    // those left the group and it went on without them.
    console.finishedAfterLeaving(stopped, finished);
    return 0;
  }
  if (all_checkpointed) {
    auto at = line.find(kPreemptedMarker);
    console.preempted(at == std::string::npos ? "preempted" : line.substr(at), seconds);
    return kExitPreempted;
  }
  if (killed_at_deadline) {
    console.preemptedAndKilled(grace);
    return kExitPreempted;
  }
  // Stopped before the group could agree on a step: a notice during start-up (a worker still
  // loading LibTorch dies of the SIGTERM itself) or a peer that left first. Nothing newer was
  // written, so the newest valid checkpoint is the one to resume from: still a preemption.
  console.preemptedBeforeCheckpoint(first_other->rank, first_other->process->poll().describe(),
                                    seconds);
  return kExitPreempted;
}

}  // namespace cumulus::launch
