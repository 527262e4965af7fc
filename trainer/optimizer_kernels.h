#pragma once
// The update rules of optimizer.h as elementwise passes over 1-D buffers, for the flat
// optimizers. Each rule exists twice:
// - a fused kernel (float32 and float64): one pass that reads each element of the parameter,
//   its gradient and its state once and writes parameter and state once (SGD: 3 reads and
//   2 writes per element; AdamW: 4 and 3), where the same formula as LibTorch operations takes
//   4 to 6 passes and allocates temporaries. It runs on LibTorch's intra-op threads
//   (at::parallel_for); each element's result depends only on its inputs, so neither the thread
//   count nor the layout changes a bit. Every operation is one IEEE float32 (float64) operation
//   in the order of optimizer.h's formulas, never fused into an FMA;
// - the same formulas as LibTorch operations, for any floating dtype (the fallback for float16
//   and bfloat16 buffers, and the per-tensor reference implementation).
// All buffers must be contiguous, of one dtype and `n` elements, and must not overlap.

#include <torch/types.h>

#include <cstdint>

namespace cumulus::trainer {

struct SgdArgs {
  double lr = 0;
  double momentum = 0;  // 0: no momentum buffer (it may be undefined / null)
  double weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // the buffer holds nothing yet: it becomes d (torch.optim's first step)
};

struct AdamWArgs {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  int64_t step = 1;  // the step being taken, 1-based (bias correction)
};

// Fused: `w`, `g`, `buf` (and `m`, `v`) are 1-D contiguous tensors of float32 or float64.
void sgdFused(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& buf,
              const SgdArgs& args);
void adamwFused(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& m,
                const torch::Tensor& v, const AdamWArgs& args);
// True for the dtypes the fused kernels handle.
bool hasFusedKernel(torch::ScalarType type);

// The same rules as LibTorch operations (temporaries allocated), for tensors of any shape.
void sgdOps(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& buf,
            const SgdArgs& args);
void adamwOps(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& m,
              const torch::Tensor& v, const AdamWArgs& args);

// Sum of the squares of a 1-D contiguous tensor's elements, accumulated in double in an order
// fixed by the element count alone (not by the thread count).
double sumOfSquares(const torch::Tensor& x);

}  // namespace cumulus::trainer
