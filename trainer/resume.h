#pragma once
// Deciding whether and how a run continues from a checkpoint (docs/spot.md, "Resume": with the
// same world size a resumed run is bit-identical to one that never stopped; with another, the
// sampler re-shards from the global cursor and the global batch is kept). Pure functions over the
// checkpoint's state.pb and the experiment; the trainer applies the plan (tensors into the model,
// optimizer importState, sampler restore). No LibTorch here.
//
// Rules:
//  - The checkpoint's experiment (state.config_yaml) must equal the current one, except for keys
//    that only say how the run is operated, not what it computes (kOperationalKeyPrefixes:
//    logging, outputs, checkpointing, launch, communication algorithm, threads, evaluation).
//    Any other difference is refused with a ResumeError that lists each key as
//    "optimizer.lr: 0.1 -> 0.05" (configs::describeDiff) and names the checkpoint, unless
//    allow_config_change is set; then the differences are returned for the log.
//  - Another world size is allowed: the sampler state (epoch, global cursor) is global and the
//    global batch is a config key, so each rank re-shards the same global batches.
//  - Same world size and config: the resumed run is bit-identical to one that never stopped
//    (the trainer reseeds torch from (seed, epoch, step, rank) at each step, so no hidden RNG
//    state needs restoring).

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "configs/experiment.h"
#include "cumulus/checkpoint_state.h"
#include "cumulus/sampler.h"

namespace cumulus::trainer {

class ResumeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The checkpoint format this build resumes (checkpoint_snapshot.h kCheckpointFormatVersion; a test
// keeps the two equal without pulling LibTorch into this header).
inline constexpr uint32_t kResumableFormatVersion = 1;

// --resume auto|none|PATH.
struct ResumeMode {
  enum class Kind { kNone, kAuto, kPath };
  Kind kind = Kind::kNone;
  std::string path;  // kPath: a checkpoint directory step-N
  // "auto", "none", or a path (anything else). Empty text: none.
  static ResumeMode parse(const std::string& text);
  // The default: auto when started by cumulus-run (CUMULUS_RUN_ID set), else none.
  static ResumeMode defaultFor(bool under_launcher);
};

// Prefixes of keys whose change does not block a resume.
extern const std::vector<std::string> kOperationalKeyPrefixes;

// The keys of diffKeys(before, after) that change what the run computes.
std::vector<std::string> semanticDiffKeys(const configs::Experiment& before,
                                          const configs::Experiment& after);

// Where a run starts over (from step 0) in a directory whose newest checkpoint holds `state`: why
// that checkpoint belongs to another experiment, as describeDiff lines of the keys that change
// what the run computes ("optimizer.lr: 0.1 -> 0.05"). Empty when it is this same experiment (at
// most operational keys differ). A recorded config that does not parse is another experiment.
std::vector<std::string> otherExperimentChanges(const configs::Experiment& current,
                                                const CheckpointState& state);

// What a user may do instead of resuming or starting over in a directory that holds another
// experiment's checkpoints (the end of every message that refuses to).
extern const char kOtherExperimentChoices[];

struct ResumePlan {
  std::string checkpoint_path;
  int64_t step = 0;  // steps completed; the next step to run
  SamplerState sampler;
  uint64_t samples_seen = 0;
  uint32_t saved_world_size = 0;
  bool world_size_changed = false;
  // Micro-batches per step from here on: trainer.grad_accumulation, or, on fewer workers than the
  // writer had, enough that no micro-batch holds more samples than the writer's largest (the
  // global batch is kept; each rank's share of it grows), as far as the global batch allows.
  int64_t grad_accumulation = 1;
  // The shares of the global batch in force at the checkpoint (trainer.balance), when the world
  // size is the writer's; empty otherwise (equal shares: another world re-shards equally).
  std::vector<int64_t> batch_shares;
  std::vector<std::string> config_changes;  // describeDiff lines, semantic and operational
  std::vector<std::string> notes;           // human-readable lines for the console
};

// Validates `state` (read from `checkpoint_path`) against the current experiment and world size.
// Throws ResumeError naming checkpoint_path for: an unknown format_version; a config_yaml that does
// not parse; a semantic config difference without allow_config_change (listing every key); a
// model or optimizer name differing from the current one; a cursor that is not a multiple of the
// global batch; a step, epoch or cursor past 2^63 - 1; a negative batch share, or shares whose
// sum passes 2^63 - 1.
ResumePlan planResume(const configs::Experiment& current, int64_t world_size,
                      const CheckpointState& state, const std::string& checkpoint_path,
                      bool allow_config_change);

// Sample ledger, for tests: which global sample indices each rank consumed, per epoch. A trainer
// whose BatchSource is wrapped in a LedgerBatchSource (tests/trainer/fault_parts.h; what
// cumulus-train-faults --sample-ledger PATH installs) appends one line per step to PATH.rank<R>:
// "L E S R i,j,k" (launch, epoch, step, rank, indices), where the launch id orders the processes
// of one job (the unix milliseconds at which the worker started). Steps run after the last
// checkpoint of a preempted launch are run again by the next launch, possibly with another world
// size; dropReplayedSteps() keeps, for each (epoch, step), only the records of the newest launch
// that ran it, which is what the final model saw.
std::string ledgerLine(int64_t launch, int64_t epoch, int64_t step, int64_t rank,
                       const std::vector<int64_t>& indices);

class SampleLedger {
 public:
  void record(int64_t launch, int64_t epoch, int64_t step, int64_t rank,
              const std::vector<int64_t>& indices);
  // Adds every line of `path`. Throws std::runtime_error naming path:line for a malformed line;
  // a missing file adds nothing.
  void readFile(const std::string& path);
  void dropReplayedSteps();

  // Problems with "every index of `expected` consumed exactly once in `epoch`, and nothing else":
  // "epoch 1: sample 17 consumed 2 times (step 3 rank 0, step 3 rank 1)",
  // "epoch 1: sample 4 never consumed". Empty means OK.
  std::vector<std::string> checkEpoch(int64_t epoch, const std::set<int64_t>& expected) const;
  std::set<int64_t> epochs() const;
  size_t records() const { return records_.size(); }

 private:
  struct Record {
    int64_t launch, epoch, step, rank;
    std::vector<int64_t> indices;
  };
  std::vector<Record> records_;
};

}  // namespace cumulus::trainer
