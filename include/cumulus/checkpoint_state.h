#pragma once
// <cumulus/checkpoint_state.h>: the plain values of <cumulus/checkpoint.h> that need no LibTorch:
// a checkpoint's state.pb as fields, and what a scan or a save reports. Included by checkpoint.h;
// include it alone where tensors are not needed (a resume check, a tool that lists checkpoints).
// Values; thread-compatible.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cumulus {

// state.pb. `step` names the directory; the rest is whatever the program fills in. save() fills
// format_version, framework_version and created_unix_ms.
struct CheckpointState {
  uint64_t step = 0;            // completed optimizer steps
  uint64_t epoch = 0;           // the sampler's epoch (setSampler)
  uint64_t sampler_cursor = 0;  // the sampler's global cursor in the epoch (setSampler)
  uint64_t seed = 0;
  std::string rng_state;      // captureRng(): torch's default CPU generator
  std::string config_digest;  // SHA-256 hex of the program's configuration, to compare on resume
  std::string config_yaml;    // the configuration itself, to show what changed
  uint32_t world_size = 0;    // of the writer
  uint64_t global_batch = 0;
  uint64_t samples_seen = 0;  // global samples consumed since the start of training
  uint32_t grad_accumulation = 0;
  std::string model;              // a name for humans and for a resume check
  std::string optimizer;          // "sgd", "adamw", "torch::optim::Adam", ...
  double learning_rate = 0;       // of the last step, for logs
  bool preempted = false;         // written at an agreed preemption stop
  uint64_t generation = 0;        // CUMULUS_GENERATION of the writer
  std::string run_id;             // CUMULUS_RUN_ID of the writer
  uint32_t format_version = 0;    // of the directory layout (set by save)
  std::string framework_version;  // "cumulus X.Y.Z, libtorch A.B.C" (set by save)
  int64_t created_unix_ms = 0;    // wall clock of the save, for humans only (set by save)
  // The ranks' shares of the global batch in force after `step` (trainer.balance), one per rank of
  // the writer; empty: equal shares (and every checkpoint written before shares existed).
  std::vector<int64_t> batch_shares;
  // What the writer trained in, "fp32" or "bf16" (<cumulus/precision.h>); the tensors are float32
  // either way, so either precision resumes it. Empty: not recorded (fp32).
  std::string precision;
};

// A checkpoint that failed verification, or an oddity worth a log line.
struct CheckpointWarning {
  std::string path;
  std::string reason;
  std::string str() const { return path + ": " + reason; }
};

struct CheckpointInfo {
  std::string path;  // <dir>/step-00001200
  uint64_t step = 0;
};

struct SaveResult {
  std::string path;  // the committed directory
  uint64_t step = 0;
  uint64_t bytes = 0;                       // all files, MANIFEST included
  double encode_seconds = 0;                // pickling and serializing
  double write_seconds = 0;                 // hashing, writing, fsync, rename
  double retention_seconds = 0;             // verifying and removing older checkpoints
  std::vector<CheckpointWarning> warnings;  // from retention: failed removals, invalid dirs kept
};

inline constexpr std::chrono::milliseconds kDefaultCheckpointWait = std::chrono::minutes(10);

}  // namespace cumulus
