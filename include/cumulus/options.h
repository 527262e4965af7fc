#pragma once
// <cumulus/options.h>: the typed choices of a group and of data parallelism, and their names.
// Options are typed from the edge down: a program that takes a name from its own command line or
// file turns it into one of these with parseAlgorithm, parseCompression or parsePrecision, and
// nothing below that point reads a string again. cumulus-train's YAML keys comm.algorithm,
// comm.compression and trainer.precision are read into the same types.
// Thread-safety: pure functions.

#include <string_view>

namespace cumulus {

// Defaults that several layers share, written here once: the public option structs
// (GroupOptions, DataParallelOptions), cumulus-train's YAML keys (comm.timeout_seconds,
// comm.bucket_cap_mb, comm.first_bucket_mb) and the libraries' own structs all start from them.
inline constexpr double kDefaultTimeoutSeconds =
    60.0;                                             // a collective's and a rendezvous's deadline
inline constexpr double kDefaultBucketCapMb = 25.0;   // the largest gradient bucket (DDP's too)
inline constexpr double kDefaultFirstBucketMb = 1.0;  // the first bucket launched in backward
// Seconds from a preemption notice to the forced exit (<cumulus/preemption.h>, cumulus-run's
// --preemption-grace, cumulus-train's): the clouds give 30 s or more, and this leaves room for
// the checkpoint.
inline constexpr double kDefaultPreemptionGraceSeconds = 25.0;

// How an all-reduce runs.
enum class Algorithm {
  kFunnel,        // through a parameter server (cumulus-run's, at CUMULUS_PS_ENDPOINT)
  kTree,          // binomial reduce to rank 0, then binomial broadcast
  kRing,          // reduce-scatter + all-gather around one ring of all ranks
  kHierarchical,  // ring inside each host, ring across hosts, ring inside each host
  kAuto,          // the cost model's pick for the size, the world and the hosts
};

// How gradient buckets travel.
enum class Compression {
  kNone,  // float32
  kBf16,  // bfloat16 on the wire (half the bytes), with error feedback
  kInt8,  // int8 with a float32 scale per 256 values: DiLoCo's outer gradients only (diloco.h)
};

// What a forward pass computes in (<cumulus/precision.h>).
enum class Precision {
  kFp32,  // float32 throughout
  kBf16,  // forward and loss under bfloat16 autocast; float32 weights, gradients and optimizer
  kAuto,  // kBf16 on a CPU with native bfloat16 (avx512_bf16 or AMX), kFp32 otherwise
};

// "funnel", "tree", "ring", "hierarchical", "auto".
const char* algorithmName(Algorithm algorithm);
// "none", "bf16".
const char* compressionName(Compression compression);
// "fp32", "bf16", "auto".
const char* precisionName(Precision precision);

// The names above, case-sensitive. Anything else throws cumulus::UserError (<cumulus/errors.h>):
//   unknown algorithm 'rng': expected one of funnel, tree, ring, hierarchical, auto; did you
//   mean 'ring'?
// Prefix the flag or key when you rethrow, as cumulus-train does ("comm.algorithm: ...").
Algorithm parseAlgorithm(std::string_view name);
Compression parseCompression(std::string_view name);
Precision parsePrecision(std::string_view name);

}  // namespace cumulus
