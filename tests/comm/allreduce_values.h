#pragma once
// Known answers for all-reduce matrices (communicator_test.cc, hierarchical_test.cc). Inputs are
// small integers, so every partial sum is exact in every dtype (even bfloat16) and the expected
// value is computed independently in int64 arithmetic. For kAvg of floating types the inputs are
// scaled by p, so the quotient is exact too; integer kAvg truncates toward zero.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/types.h"

namespace cumulus::comm::testing {

// IEEE binary16 as comm/reduce.cc spells it: clang 14 (make thread-safety) has no _Float16 on
// x86-64, and its __fp16 has the same storage and conversions.
#if defined(__clang__) && __clang_major__ < 15
using Half = __fp16;
#else
using Half = _Float16;
#endif

inline const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                DType::kFloat16, DType::kInt32,   DType::kInt64};
inline const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

inline bool isFloating(DType d) { return d != DType::kInt32 && d != DType::kInt64; }

inline int64_t base(int rank, size_t i) {
  return static_cast<int64_t>((i * 7 + rank * 13) % 11) - 5;
}

inline int64_t input(int rank, size_t i, int p, DType d, ReduceOp op) {
  return (op == ReduceOp::kAvg && isFloating(d)) ? base(rank, i) * p : base(rank, i);
}

inline int64_t expected(size_t i, int p, DType d, ReduceOp op) {
  int64_t acc = base(0, i);
  for (int r = 1; r < p; ++r) {
    const int64_t v = base(r, i);
    acc = op == ReduceOp::kMax   ? std::max(acc, v)
          : op == ReduceOp::kMin ? std::min(acc, v)
                                 : acc + v;
  }
  return acc;  // avg: floats were scaled by p, so the average is the plain sum of `base`
}

inline int64_t expectedAvgInt(size_t i, int p) {
  int64_t sum = 0;
  for (int r = 0; r < p; ++r) sum += base(r, i);
  return sum / p;  // C++: toward zero
}

// Independent encoders: small integers are exact in every type, so no rounding is involved.
inline void store(void* data, size_t i, DType d, int64_t v) {
  switch (d) {
    case DType::kFloat32:
      static_cast<float*>(data)[i] = float(v);
      break;
    case DType::kFloat64:
      static_cast<double*>(data)[i] = double(v);
      break;
    case DType::kFloat16:
      static_cast<Half*>(data)[i] = Half(float(v));
      break;
    case DType::kBFloat16: {
      float f = float(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(data)[i] = uint16_t(bits >> 16);  // exact: low bits are zero
      break;
    }
    case DType::kInt32:
      static_cast<int32_t*>(data)[i] = int32_t(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(data)[i] = v;
      break;
  }
}

inline double load(const void* data, size_t i, DType d) {
  switch (d) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DType::kFloat64:
      return static_cast<const double*>(data)[i];
    case DType::kFloat16:
      return float(static_cast<const Half*>(data)[i]);
    case DType::kBFloat16: {
      uint32_t bits = uint32_t(static_cast<const uint16_t*>(data)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kInt32:
      return static_cast<const int32_t*>(data)[i];
    case DType::kInt64:
      return double(static_cast<const int64_t*>(data)[i]);
  }
  return 0;
}

// Runs every dtype × op × count through `algorithm` on this rank (every rank of the group calls
// it at once) and checks each answer and that nothing was written past the end. Returns "" or
// the first failure, naming algorithm, world, rank, count, dtype, op and index.
inline std::string checkAllreduceMatrix(Communicator& comm, Algorithm algorithm,
                                        const std::vector<size_t>& counts) {
  const int p = comm.world();
  const int rank = comm.rank();
  std::vector<uint8_t> data;
  for (size_t count : counts) {
    for (DType d : kDTypes) {
      for (ReduceOp op : kOps) {
        data.assign(count * elementSize(d) + 1, 0xAB);
        for (size_t i = 0; i < count; ++i) store(data.data(), i, d, input(rank, i, p, d, op));
        Buffer buffer{data.data(), count, d};
        comm.allreduce(buffer, {op, algorithm});
        for (size_t i = 0; i < count; ++i) {
          const double want = (op == ReduceOp::kAvg && !isFloating(d))
                                  ? double(expectedAvgInt(i, p))
                                  : double(expected(i, p, d, op));
          const double got = load(data.data(), i, d);
          if (got != want) {
            std::ostringstream msg;
            msg << algorithmName(algorithm) << " p=" << p << " rank " << rank << " count=" << count
                << " " << dtypeName(d) << " " << reduceOpName(op) << ": index " << i << " got "
                << got << " want " << want;
            return msg.str();
          }
        }
        if (data.back() != 0xAB) return "wrote past the end of the buffer";
      }
    }
  }
  return "";
}

}  // namespace cumulus::comm::testing
