#pragma once
// Element types and reduction operators of the communicator. No LibTorch: buffers are raw
// contiguous memory (pointer, element count, DType), as in Gloo.

#include <cstddef>
#include <cstdint>
#include <string>

namespace cumulus::comm {

enum class DType : uint8_t { kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64 };
// kProduct multiplies (integers wrap around); kBand, kBor and kBxor are bitwise and, or and
// exclusive or, of integer dtypes only. New values go at the end: the parameter server's requests
// carry the number.
enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProduct, kBand, kBor, kBxor };

size_t elementSize(DType dtype);
const char* dtypeName(DType dtype);     // "float32", …
const char* reduceOpName(ReduceOp op);  // "sum", …
bool isIntegral(DType dtype);
bool isBitwise(ReduceOp op);
// Why `op` cannot reduce `dtype` ("bitwise or needs an integer dtype, not float32"), or "" when it
// can. Every collective that reduces checks it before anything is sent.
std::string reduceProblem(DType dtype, ReduceOp op);

// A view of caller-owned memory. The communicator never frees or resizes it.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  size_t bytes() const { return count * elementSize(dtype); }
};

}  // namespace cumulus::comm
