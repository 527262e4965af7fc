#pragma once
// The parameters as a state_dict file that Python reads with torch.load: a pickled
// Dict[str, Tensor] in PyTorch's zip format, written by torch::pickle_save.

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "checkpoint/optimizer_state.h"  // NamedTensors

namespace cumulus::trainer {

// Writes `tensors` (detached, contiguous CPU copies) to `path` through `path`.tmp and a rename,
// so a reader never sees half a file. Throws std::runtime_error naming the path on failure.
void saveStateDict(const checkpoint::NamedTensors& tensors, const std::string& path);

// Reads a file written by saveStateDict (or by Python's torch.save of a dict of tensors with
// _use_new_zipfile_serialization). Throws std::runtime_error naming the path.
checkpoint::NamedTensors loadStateDict(const std::string& path);

}  // namespace cumulus::trainer
