#pragma once
// The preemption agreement is public API: <cumulus/preemption.h> (PreemptionWatcher, the signal
// handlers, AgreeMax). The trainer's names for it.

#include "cumulus/preemption.h"
#include "trainer/stop_agreement.h"

namespace cumulus::trainer {
using cumulus::agreeAlone;
using cumulus::AgreeMax;
using cumulus::checkpointSignalsReceived;
using cumulus::installCheckpointSignalHandler;
using cumulus::installSigtermHandler;
using cumulus::kDefaultPreemptionGraceSeconds;
using cumulus::kExitPreempted;
using cumulus::PreemptionOptions;
using cumulus::PreemptionWatcher;
using cumulus::resetCheckpointSignalsForTesting;
using cumulus::resetSigtermForTesting;
using cumulus::sigtermReceived;
}  // namespace cumulus::trainer
