#pragma once
// <cumulus/options.h>: the typed choices of a group and of data parallelism, and their names.
// Options are typed from the edge down: a program that takes a name from its own command line or
// file turns it into one of these with parseAlgorithm, parseCompression or parsePrecision, and
// nothing below that point reads a string again. cumulus-train's YAML keys comm.algorithm,
// comm.compression and trainer.precision are read into the same types.
// Thread-safety: pure functions.

#include <chrono>
#include <cstdint>
#include <string_view>
#include <utility>

namespace cumulus {

// Defaults that several layers share, written here once: the public option structs
// (GroupOptions, DataParallelOptions), cumulus-train's YAML keys (comm.timeout_seconds,
// comm.bucket_cap_mb, comm.first_bucket_mb) and the libraries' own structs all start from them.
// A collective's and a rendezvous's deadline; kDefaultTimeout is the same as the libraries' own
// structs hold it.
inline constexpr double kDefaultTimeoutSeconds = 60.0;
inline constexpr std::chrono::milliseconds kDefaultTimeout{
    static_cast<int64_t>(kDefaultTimeoutSeconds * 1000)};
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

// How a group recovers from a failed worker or node (cumulus-run's --recovery, cumulus-train's
// launch.recovery, CUMULUS_RECOVERY in a worker's environment).
enum class Recovery {
  kInPlace,  // the survivors re-form without restarting; replacements join them (the default)
  kRestart,  // every worker stops and the group restarts from the newest checkpoint
};

// Each value with its name, in the order the errors and the docs list them. Every program and
// the YAML schema take the names from these tables; enumNames(E) is how the library finds one.
inline constexpr std::pair<Algorithm, const char*> kAlgorithmNames[] = {
    {Algorithm::kFunnel, "funnel"},
    {Algorithm::kTree, "tree"},
    {Algorithm::kRing, "ring"},
    {Algorithm::kHierarchical, "hierarchical"},
    {Algorithm::kAuto, "auto"}};
inline constexpr std::pair<Compression, const char*> kCompressionNames[] = {
    {Compression::kNone, "none"}, {Compression::kBf16, "bf16"}, {Compression::kInt8, "int8"}};
inline constexpr std::pair<Precision, const char*> kPrecisionNames[] = {
    {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kAuto, "auto"}};
inline constexpr std::pair<Recovery, const char*> kRecoveryNames[] = {
    {Recovery::kInPlace, "in_place"}, {Recovery::kRestart, "restart"}};
constexpr const auto& enumNames(Algorithm) { return kAlgorithmNames; }
constexpr const auto& enumNames(Compression) { return kCompressionNames; }
constexpr const auto& enumNames(Precision) { return kPrecisionNames; }
constexpr const auto& enumNames(Recovery) { return kRecoveryNames; }

// The one default of the recovery mode.
inline constexpr Recovery kDefaultRecovery = Recovery::kInPlace;

// "funnel", "tree", "ring", "hierarchical", "auto".
const char* algorithmName(Algorithm algorithm);
// "none", "bf16", "int8".
const char* compressionName(Compression compression);
// "fp32", "bf16", "auto".
const char* precisionName(Precision precision);
// "in_place", "restart".
const char* recoveryName(Recovery recovery);

// The names above, case-sensitive. Anything else throws cumulus::UserError (<cumulus/errors.h>):
//   unknown algorithm 'rng': expected one of funnel, tree, ring, hierarchical, auto; did you
//   mean 'ring'?
// Prefix the flag or key when you rethrow, as cumulus-train does ("comm.algorithm: ...").
Algorithm parseAlgorithm(std::string_view name);
Compression parseCompression(std::string_view name);
Precision parsePrecision(std::string_view name);
Recovery parseRecovery(std::string_view name);

}  // namespace cumulus
