#include "comm/types.h"

#include <cassert>

namespace cumulus::comm {

size_t elementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat16:
      return 2;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
  }
  assert(false && "unknown DType");
  return 0;
}

const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "unknown-dtype";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kBand:
      return "band";
    case ReduceOp::kBor:
      return "bor";
    case ReduceOp::kBxor:
      return "bxor";
  }
  return "unknown-op";
}

bool isIntegral(DType dtype) { return dtype == DType::kInt32 || dtype == DType::kInt64; }

bool isBitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}

std::string reduceProblem(DType dtype, ReduceOp op) {
  if (isBitwise(op) && !isIntegral(dtype)) {
    return std::string("the bitwise op ") + reduceOpName(op) +
           " needs an integer dtype (int32 or " + "int64), not " + dtypeName(dtype);
  }
  return "";
}

}  // namespace cumulus::comm
