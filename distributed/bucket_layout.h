#pragma once
// How gradients are grouped into flat buckets for all-reduce (as DDP's compute_bucket_assignment_
// by_size). No LibTorch: a parameter is described by its element count, element size and a dtype
// key, so the layout is a pure function that every rank computes identically.
//
// Rules:
// - Parameters are visited in REVERSE registration order: backward produces gradients roughly
//   from the last layer to the first, so the first bucket fills (and its all-reduce can start)
//   while backward is still working on earlier layers.
// - A bucket holds one dtype (a collective reduces one element type). Each dtype has its own open
//   bucket; a bucket is closed when the next parameter of its dtype would push it past its cap,
//   so a bucket exceeds its cap only when it holds a single parameter larger than the cap.
// - The first bucket closed has the small cap `first_cap_bytes` (communication starts early);
//   every later one has `cap_bytes`. Buckets are numbered in the order they close; the rest close
//   at the end in dtype-key order. Every rank launches bucket i only after bucket i-1, so the
//   numbering is the cross-rank order of the collectives.
// - Within a bucket a parameter's gradient occupies [offset, offset + numel) elements.
//
// Throws std::invalid_argument on a non-positive cap.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cumulus::distributed {

struct ParamInfo {
  size_t numel = 0;
  size_t element_size = 4;
  int dtype = 0;  // any key that is equal exactly for parameters of the same element type
};

struct BucketSpec {
  int dtype = 0;
  size_t element_size = 4;
  std::vector<size_t> params;   // indices into the parameter list, in the order they were added
  std::vector<size_t> offsets;  // element offset of each parameter's gradient in the flat bucket
  size_t numel = 0;             // elements in the flat bucket
  size_t bytes() const { return numel * element_size; }
};

std::vector<BucketSpec> computeBucketLayout(const std::vector<ParamInfo>& params, size_t cap_bytes,
                                            size_t first_cap_bytes);

// "3 buckets: #0 12 params 1.0 MiB, #1 …" for logs.
std::string describeBuckets(const std::vector<BucketSpec>& buckets);

// Bytes of a configured size in MiB (comm.bucket_cap_mb); throws std::invalid_argument naming
// `key` when it is not positive.
size_t mebibytes(double mb, const char* key);

}  // namespace cumulus::distributed
