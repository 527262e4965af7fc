#include "launch/spot_trace.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "base/integer.h"

namespace cumulus::launch {
namespace {

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

double uniformAt(uint64_t seed, uint64_t index) {
  const uint64_t bits = splitMix64(seed ^ (0x9e3779b97f4a7c15ULL * (index + 1)));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // 53 random bits
}

SpotTrace::SpotTrace(SpotTraceOptions options) : options_(std::move(options)) {
  if (!(options_.notice_s >= 0)) {
    throw std::invalid_argument("--notice: must be >= 0 seconds");
  }
  if (!(options_.relaunch_delay_s >= 0)) {
    throw std::invalid_argument("--relaunch-delay: must be >= 0 seconds");
  }
  for (int64_t w : options_.world_sizes) {
    if (w < 1) throw std::invalid_argument("--world-sizes: " + std::to_string(w) + " is < 1");
  }
}

SpotLaunch SpotTrace::launch(int64_t index) const {
  SpotLaunch launch;
  launch.index = index;
  if (!options_.world_sizes.empty()) {
    launch.world_size =
        options_.world_sizes[static_cast<size_t>(index) % options_.world_sizes.size()];
  }
  if (options_.mean_interval_s > 0 && index < options_.max_preemptions) {
    // Inverse CDF of Exp(1/M); 1 - u is in (0, 1], so the log is finite.
    const double u = uniformAt(options_.seed, static_cast<uint64_t>(index));
    launch.notice_after_s = -options_.mean_interval_s * std::log(1.0 - u);
  }
  return launch;
}

std::string SpotTrace::describe(int64_t count) const {
  std::ostringstream out;
  for (int64_t i = 0; i < count; ++i) {
    const SpotLaunch l = launch(i);
    char when[64];
    if (l.preempted()) {
      std::snprintf(when, sizeof when, "notice at %.1f s", l.notice_after_s);
    } else {
      std::snprintf(when, sizeof when, "no notice");
    }
    out << "launch " << i << ": world "
        << (l.world_size > 0 ? std::to_string(l.world_size) : std::string("as given")) << ", "
        << when << "\n";
  }
  return out.str();
}

std::vector<int64_t> parseWorldSizes(const std::string& text, const std::string& flag) {
  std::vector<int64_t> sizes;
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const std::optional<int64_t> value = base::parseInteger(item, 1);
    if (!value) {
      throw std::invalid_argument(flag + ": '" + item +
                                  "' is not a world size (a list like 2,1,2 of integers >= 1)");
    }
    sizes.push_back(*value);
  }
  if (sizes.empty()) throw std::invalid_argument(flag + ": empty list; give e.g. 2,1,2");
  return sizes;
}

}  // namespace cumulus::launch
