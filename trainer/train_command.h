#pragma once
// cumulus-train as a function: parses the flags, loads the experiment, joins the group, trains
// and returns the exit code (0 done, 1 failed, 2 the user must fix something, 75 preempted after
// a checkpoint). trainer/main.cc is this and nothing else; a test program may call it with a
// customization that installs its own parts in the trainer's options (the seam for faults).

#include <functional>

#include "trainer/trainer.h"

namespace cumulus::trainer {

// Called once, after the options are set from the flags and before the Trainer is built.
using TrainCustomization = std::function<void(TrainerOptions&)>;

// Installs the SIGTERM and SIGUSR1 handlers first, then runs. Never throws.
int trainCommand(int argc, char** argv, const TrainCustomization& customize = {});

}  // namespace cumulus::trainer
