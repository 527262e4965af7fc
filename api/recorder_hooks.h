#pragma once
// What a program of this tree may add to a cumulus::Recorder beyond RecorderOptions (not
// installed): the startup profile its first step's line and record break down, and a wrap of each
// membership's MetricsRecorder (cumulus-train's TrainerOptions::metrics, through which its fault
// tests stop or kill a worker at a chosen record). Everything recorded still goes through the
// Recorder's public calls.

#include <functional>
#include <memory>

#include "cumulus/recorder.h"
#include "metrics/recorder.h"

namespace cumulus {

namespace metrics {
class StartupProfile;
}

struct RecorderHooks {
  const metrics::StartupProfile* startup = nullptr;  // marked "step" before the first step()
  // Given each membership's standard recorder, the one to use; empty: the standard one.
  std::function<std::shared_ptr<metrics::MetricsRecorder>(
      std::shared_ptr<metrics::MetricsRecorder>)>
      wrap;
};

// A Recorder as Recorder(elastic, options) makes it, with `hooks`.
std::unique_ptr<Recorder> makeRecorder(Elastic& elastic, RecorderOptions options,
                                       RecorderHooks hooks);

}  // namespace cumulus
