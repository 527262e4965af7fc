#pragma once
// torch.save's file format for what the C++ side writes for Python to read (model.pt,
// optimizer.pt, residuals.pt, model_state_dict.pt): a zip holding data.pkl and one record per
// tensor, which Python's torch.load reads with its default weights_only=True.
//
// LibTorch's own torch::pickle_save tags every dict and list with its TorchScript type
// (torch.jit._pickle.restore_type_tag), a global that torch.load's weights-only unpickler refuses
// since torch 2.6: a user's plain torch.load("model.pt") then failed. These files carry no tags;
// torch::pickle_load reads them back as generic dicts and lists.

#include <ATen/core/ivalue.h>

#include <vector>

namespace cumulus::checkpoint {

std::vector<char> pickleForPython(const c10::IValue& value);

}  // namespace cumulus::checkpoint
