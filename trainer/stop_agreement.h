#pragma once
// StopAgreement is public API: <cumulus/preemption.h>. The trainer's names for it.

#include "cumulus/preemption.h"

namespace cumulus::trainer {
using cumulus::StepAction;
using cumulus::StopAgreement;
}  // namespace cumulus::trainer
