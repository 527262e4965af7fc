#pragma once
// The distributed sampler is public API: <cumulus/sampler.h>. This header keeps its names in
// cumulus::data for the data layer's callers.

#include "cumulus/sampler.h"

namespace cumulus::data {
using cumulus::DistributedSampler;
using cumulus::SamplerState;
}  // namespace cumulus::data
