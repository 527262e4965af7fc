#include "metrics/progress.h"

#include <cmath>
#include <cstdio>

namespace cumulus::metrics {

Progress::Progress(std::ostream& out, bool live, int64_t total_steps, int64_t epochs,
                   int64_t log_every, bool quiet)
    : out_(out),
      live_(live),
      total_(total_steps),
      epochs_(epochs),
      log_every_(log_every),
      quiet_(quiet) {}

std::string Progress::formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  } else {
    std::snprintf(text, sizeof(text), "%lld:%02lld", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  }
  return text;
}

std::string Progress::statusText(const StepReport& r) const {
  const double eta = r.step > 0 ? r.elapsed_seconds / static_cast<double>(r.step) *
                                      static_cast<double>(total_ - r.step)
                                : -1;
  char text[160];
  std::snprintf(text, sizeof(text),
                "epoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s",
                static_cast<long long>(r.epoch), static_cast<long long>(epochs_),
                static_cast<long long>(r.step), static_cast<long long>(total_), r.loss,
                r.samples_per_sec, formatDuration(eta).c_str());
  return text;
}

void Progress::update(const StepReport& r) {
  if (quiet_) return;
  if (live_) {
    const bool last = r.step >= total_;
    if (!last && last_draw_ >= 0 && r.elapsed_seconds - last_draw_ < 0.1) return;
    last_draw_ = r.elapsed_seconds;
    const std::string text = statusText(r);
    out_ << '\r' << text;
    if (text.size() < live_width_) out_ << std::string(live_width_ - text.size(), ' ');
    live_width_ = text.size();
    out_.flush();
  } else if (log_every_ > 0 && (r.step % log_every_ == 0 || r.step == 1)) {
    out_ << statusText(r) << '\n';
    out_.flush();
  }
}

void Progress::clearLive() {
  if (live_ && live_width_ > 0) {
    out_ << '\r' << std::string(live_width_, ' ') << '\r';
    live_width_ = 0;
    last_draw_ = -1;
  }
}

void Progress::line(const std::string& text) {
  clearLive();
  out_ << text << '\n';
  out_.flush();
}

void Progress::info(const std::string& text) {
  if (!quiet_) line(text);
}

void Progress::finish() {
  if (live_ && live_width_ > 0) {
    out_ << '\n';
    live_width_ = 0;
  }
  out_.flush();
}

}  // namespace cumulus::metrics
