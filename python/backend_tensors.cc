#include "python/backend_tensors.h"

#include <torch/types.h>

#include <algorithm>
#include <stdexcept>

#include "cumulus/errors.h"

namespace cumulus::python {
namespace {

bool carried(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

bool throughInt32(at::ScalarType type) {
  return type == at::kByte || type == at::kChar || type == at::kShort || type == at::kBool;
}

// "[4, 5] (1 sparse dimension)" from a row {nnz, sparse_dim, dense_dim, sizes...}.
std::string sparseShape(const at::Tensor& row) {
  std::string text = "[";
  for (int64_t d = 3; d < row.size(0); ++d) {
    text += (d > 3 ? ", " : "") + std::to_string(row[d].item<int64_t>());
  }
  const int64_t sparse = row[1].item<int64_t>();
  return text + "] (" + std::to_string(sparse) + " sparse dimension" + (sparse == 1 ? ")" : "s)");
}

}  // namespace

void Wire::restore() {
  if (!original.defined()) return;
  torch::NoGradGuard no_grad;
  original.copy_(boolean ? tensor.ne(0) : tensor);
}

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("cumulus backend: " + what);
}

// Throws std::invalid_argument unless `tensor` can be moved as bytes (a dense CPU tensor of any
// dtype): what send, recv, gather, scatter and all_to_all take. Checked when the call is made.
void checkMovable(const char* op, const at::Tensor& tensor) {
  if (!tensor.defined()) refuse(std::string(op) + ": the tensor is undefined");
  if (!tensor.device().is_cpu()) {
    refuse(std::string(op) + ": the tensor is on " + tensor.device().str() +
           "; this backend takes CPU tensors (move it with .cpu())");
  }
  if (tensor.is_sparse()) refuse(std::string(op) + ": sparse tensors are not supported");
}

// The same, and of a dtype the reducing collectives carry.
void checkTensor(const char* op, const at::Tensor& tensor) {
  checkMovable(op, tensor);
  const at::ScalarType type = tensor.scalar_type();
  if (!carried(type) && !throughInt32(type) && !at::isComplexType(type)) {
    refuse(std::string(op) + ": tensors of dtype " + c10::toString(type) +
           " are not supported (floating, integer, bool and complex dtypes are)");
  }
}

Wire wireOf(const at::Tensor& tensor) {
  const at::ScalarType type = tensor.scalar_type();
  if (carried(type)) return {tensor, {}, false};
  if (at::isComplexType(type)) return {at::view_as_real(tensor), {}, false};
  return {tensor.to(at::kInt), tensor, type == at::kBool};
}

// `value` (as it travelled) written into `out`, whose dtype it came from.
void writeInto(const at::Tensor& out, const at::Tensor& value) {
  torch::NoGradGuard no_grad;
  at::Tensor target = at::isComplexType(out.scalar_type()) ? at::view_as_real(out) : out;
  target.copy_(value.reshape(target.sizes()));
}

void checkRoot(const char* op, int root, int size) {
  if (root < 0 || root >= size) {
    refuse(std::string(op) + ": root " + std::to_string(root) + " must be in [0, " +
           std::to_string(size) + ")");
  }
}

// `splits` cut `tensor`'s first dimension into one block per rank (empty: equal blocks).
void checkSplits(const char* op, const char* what, const at::Tensor& tensor,
                 const std::vector<int64_t>& splits, int size) {
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  if (splits.empty()) {
    if (rows % size == 0) return;
    refuse(std::string(op) + ": the " + what + "'s first dimension (" + std::to_string(rows) +
           ") is not a multiple of the group's " + std::to_string(size) +
           " ranks; pass its split sizes");
  }
  int64_t sum = 0;
  bool negative = false;
  for (int64_t s : splits) {
    sum += s;
    negative = negative || s < 0;
  }
  if (static_cast<int>(splits.size()) != size || sum != rows || negative) {
    refuse(std::string(op) + ": the " + what + "'s split sizes must be " + std::to_string(size) +
           " counts of rows, none negative, summing to its first dimension (" +
           std::to_string(rows) + "); got " + std::to_string(splits.size()) + " summing to " +
           std::to_string(sum));
  }
}

// The tensors of `list` flattened into one contiguous 1-D tensor, in order.
at::Tensor flatCat(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// `flat`'s consecutive pieces written into the tensors of `list` (numel each).
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const at::Tensor& t : list) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

const at::Tensor& theOne(const char* op, const std::vector<at::Tensor>& tensors,
                         TensorCheck check) {
  if (tensors.size() != 1) {
    refuse(std::string(op) + ": takes one tensor per call (one device per process), got " +
           std::to_string(tensors.size()));
  }
  check(op, tensors[0]);
  return tensors[0];
}

// `list` holds `size` tensors of `like`'s elements and dtype.
void checkList(const char* op, const std::vector<at::Tensor>& list, int size,
               const at::Tensor& like, const char* what, TensorCheck check) {
  if (static_cast<int>(list.size()) != size) {
    refuse(std::string(op) + ": " + what + " has " + std::to_string(list.size()) +
           " tensors; the group has " + std::to_string(size) + " ranks");
  }
  for (const at::Tensor& t : list) {
    check(op, t);
    if (t.numel() != like.numel() || t.scalar_type() != like.scalar_type()) {
      refuse(std::string(op) + ": every tensor of " + what + " must have " +
             std::to_string(like.numel()) + " elements of " + c10::toString(like.scalar_type()) +
             ", got " + std::to_string(t.numel()) + " of " + c10::toString(t.scalar_type()));
    }
  }
}

// A sparse (COO) all-reduce, SUM only, as Gloo's: every rank's indices and values are
// all-gathered (padded to the largest count) and their sum, coalesced, replaces `tensor`.
void sparseAllreduce(ProcessGroup& group, const at::Tensor& tensor, const CollectiveOptions& call) {
  torch::NoGradGuard no_grad;
  const at::Tensor mine = tensor.coalesce();
  std::vector<int64_t> shape{mine._nnz(), mine.sparse_dim(), mine.dense_dim()};
  for (int64_t d : mine.sizes()) shape.push_back(d);
  // Ranks whose tensors have a different number of dimensions fail in this all-gather (its
  // length check), naming the peer; different sizes are named below, on every rank alike.
  const at::Tensor shapes = group.allgather(at::tensor(shape, at::kLong), call);
  int64_t most = 0;
  for (int64_t r = 0; r < shapes.size(0); ++r) {
    const at::Tensor theirs = shapes[r].narrow(0, 1, shapes.size(1) - 1);
    if (!at::equal(theirs, shapes[0].narrow(0, 1, shapes.size(1) - 1))) {
      throw CommError(CommErrorKind::kInvalid, "all_reduce", 0, static_cast<int>(r),
                      "sparse tensors of different shapes: rank 0's is " + sparseShape(shapes[0]) +
                          ", rank " + std::to_string(r) + "'s " + sparseShape(shapes[r]));
    }
    most = std::max(most, shapes[r][0].item<int64_t>());
  }
  auto padded = [most](const at::Tensor& t, int64_t dim) {
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[dim] = most - sizes[dim];
    return at::cat({t, at::zeros(sizes, t.options())}, dim).contiguous();
  };
  const at::Tensor indices = group.allgather(padded(mine._indices(), 1), call);
  const at::Tensor values = group.allgather(padded(mine._values(), 0), call);
  std::vector<at::Tensor> all_indices, all_values;
  for (int64_t r = 0; r < shapes.size(0); ++r) {
    const int64_t count = shapes[r][0].item<int64_t>();
    all_indices.push_back(indices[r].narrow(1, 0, count));
    all_values.push_back(values[r].narrow(0, 0, count));
  }
  const at::Tensor sum =
      at::sparse_coo_tensor(at::cat(all_indices, 1), at::cat(all_values, 0), mine.sizes())
          .coalesce();
  tensor.copy_(sum);
}

}  // namespace cumulus::python
