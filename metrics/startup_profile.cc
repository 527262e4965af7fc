#include "metrics/startup_profile.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace cumulus::metrics {
namespace {

double bootSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Field 22 of /proc/self/stat: the start time in clock ticks after boot. The command name (field
// 2) may hold spaces and parentheses, so fields are counted after its last ')'.
double processStartBootSeconds() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) {
      const long ticks = sysconf(_SC_CLK_TCK);
      return ticks > 0 ? std::stod(field) / static_cast<double>(ticks) : -1;
    }
  }
  return -1;
}

}  // namespace

double secondsSinceProcessStart() {
  const double start = processStartBootSeconds();
  return start < 0 ? 0 : std::max(0.0, bootSeconds() - start);
}

StartupProfile::StartupProfile() {
  last_ = bootSeconds();
  phases_.emplace_back("process", secondsSinceProcessStart());
}

void StartupProfile::mark(const std::string& phase) {
  const double t = bootSeconds();
  phases_.emplace_back(phase, t - last_);
  last_ = t;
}

double StartupProfile::totalSeconds() const {
  double total = 0;
  for (const auto& [name, seconds] : phases_) total += seconds;
  return total;
}

std::string StartupProfile::summary() const {
  char number[32];
  std::snprintf(number, sizeof number, "%.2f", totalSeconds());
  std::string text = std::string(number) + " s after exec:";
  const char* separator = " ";
  for (const auto& [name, seconds] : phases_) {
    std::snprintf(number, sizeof number, "%.2f", seconds);
    text += separator + name + " " + number;
    separator = ", ";
  }
  return text;
}

}  // namespace cumulus::metrics
