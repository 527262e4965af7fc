#pragma once
// What the cumulus backend (python/backend.h) takes and how tensors travel through the Cumulus
// group beneath it: the checks each call makes when it is called (std::invalid_argument, which
// Python sees as ValueError, through refuse()), the wire forms of the dtypes the group does not
// carry, and the sparse all-reduce. Internal to python/.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cumulus/process_group.h"

namespace cumulus::python {

// Throws std::invalid_argument("cumulus backend: " + what).
[[noreturn]] void refuse(const std::string& what);

// Throws unless `tensor` can be moved as bytes (a dense CPU tensor of any dtype): what send,
// recv, gather, scatter and all_to_all take.
void checkMovable(const char* op, const at::Tensor& tensor);
// The same, and of a dtype the reducing collectives carry (floating, integer, bool, complex).
void checkTensor(const char* op, const at::Tensor& tensor);
// checkTensor or checkMovable.
using TensorCheck = void (*)(const char* op, const at::Tensor& tensor);
// The one tensor of a call (one device per process), checked.
const at::Tensor& theOne(const char* op, const std::vector<at::Tensor>& tensors,
                         TensorCheck check = checkTensor);
// `list` holds `size` tensors of `like`'s elements and dtype, each checked.
void checkList(const char* op, const std::vector<at::Tensor>& list, int size,
               const at::Tensor& like, const char* what, TensorCheck check = checkTensor);
void checkRoot(const char* op, int root, int size);
// `splits` cut `tensor`'s first dimension into one block per rank (empty: equal blocks).
void checkSplits(const char* op, const char* what, const at::Tensor& tensor,
                 const std::vector<int64_t>& splits, int size);

// A tensor as it travels: itself (the dtypes the wire carries, complex as its real view) or an
// int32 copy (uint8, int8, int16, bool) that restore() writes back.
struct Wire {
  at::Tensor tensor;
  at::Tensor original;  // defined when `tensor` is a converted copy
  bool boolean = false;

  // Writes a converted copy back into the original.
  void restore();
};

Wire wireOf(const at::Tensor& tensor);
// `value` (as it travelled) written into `out`, whose dtype it came from.
void writeInto(const at::Tensor& out, const at::Tensor& value);

// The tensors of `list` flattened into one contiguous 1-D tensor, in order.
at::Tensor flatCat(const std::vector<at::Tensor>& list);
// `flat`'s consecutive pieces written into the tensors of `list` (numel each).
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list);

// A sparse (COO) all-reduce, SUM only, as Gloo's: every rank's indices and values are
// all-gathered (padded to the largest count) and their sum, coalesced, replaces `tensor`.
// Shapes that differ across ranks throw CommError(kInvalid) naming both.
void sparseAllreduce(ProcessGroup& group, const at::Tensor& tensor, const CollectiveOptions& call);

}  // namespace cumulus::python
