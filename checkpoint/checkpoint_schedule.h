#pragma once
// When a periodic checkpoint is due (checkpoint.every_steps / checkpoint.every_seconds). No
// LibTorch here.
//
// Asked once per step boundary with the number of completed steps. Due when every_steps > 0 and
// that number is a multiple of it, or when every_seconds > 0 and at least that long has passed
// since the last markSaved() (or since construction). Both can be set; 0 turns one off. Steps are
// counted from the start of training, so a resumed run keeps the same step grid.
//
// Which ranks ask: with identical replicas only the writer (rank 0) needs to, because a snapshot
// is a local copy and involves no collective. A time-based schedule read on several ranks would
// disagree; never make a collective depend on due().
// Not thread-safe (the training thread owns it).

#include <cstdint>
#include <functional>

namespace cumulus::checkpoint {

class CheckpointSchedule {
 public:
  // clock: monotonic seconds; empty means std::chrono::steady_clock. Throws std::invalid_argument
  // for a negative every_steps or every_seconds.
  CheckpointSchedule(int64_t every_steps, double every_seconds, std::function<double()> clock = {});

  bool enabled() const { return every_steps_ > 0 || every_seconds_ > 0; }
  // After `steps_done` (>= 1) steps are complete.
  bool due(int64_t steps_done) const;
  // A checkpoint of this point was taken: restarts the timer.
  void markSaved();
  // Seconds until the time-based trigger fires (0 if overdue), or -1 when it is off.
  double secondsUntilDue() const;

 private:
  double now() const;
  int64_t every_steps_;
  double every_seconds_;
  std::function<double()> clock_;
  double last_saved_;
};

}  // namespace cumulus::checkpoint
