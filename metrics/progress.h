#pragma once
// The console side of a training run. On a terminal (`live`), one status line is redrawn in place
// with '\r' at most every 0.1 s; otherwise (a log file, a pipe, a test) a plain line is printed
// every `log_every` steps. Lines from line() (warnings, a preemption) and info() (evaluation
// results, the final summary) are printed in full above the status line. A quiet Progress (a rank
// other than 0, unless trainer.log_all_ranks) prints line() alone: no status, no info(). No
// LibTorch here. Not thread-safe.

#include <cstdint>
#include <ostream>
#include <string>

namespace cumulus::metrics {

struct StepReport {
  int64_t step = 0;   // optimizer steps completed, 1-based
  int64_t epoch = 0;  // 1-based epoch the step belongs to
  double loss = 0;    // mean training loss over the steps since the last plain line
  double samples_per_sec = 0;
  double elapsed_seconds = 0;  // since training began
};

class Progress {
 public:
  Progress(std::ostream& out, bool live, int64_t total_steps, int64_t epochs, int64_t log_every,
           bool quiet = false);
  void update(const StepReport& report);
  // Always printed.
  void line(const std::string& text);
  // Printed unless quiet.
  void info(const std::string& text);
  // Ends the status line (live mode) so the next output starts on a fresh line.
  void finish();

  // Whether `rank`'s routine output is quiet: every rank but 0, unless trainer.log_all_ranks.
  static bool quietFor(int64_t rank, bool log_all_ranks) { return rank != 0 && !log_all_ranks; }

  // "1:02:03" or "2:03"; "?" for negative or non-finite.
  static std::string formatDuration(double seconds);

 private:
  std::string statusText(const StepReport& report) const;
  void clearLive();

  std::ostream& out_;
  bool live_;
  int64_t total_;
  int64_t epochs_;
  int64_t log_every_;
  bool quiet_;
  double last_draw_ = -1;
  size_t live_width_ = 0;  // characters of the status line now on screen
};

}  // namespace cumulus::metrics
