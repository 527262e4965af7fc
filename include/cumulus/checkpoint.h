#pragma once
// <cumulus/checkpoint.h>: crash-consistent, verified checkpoints in a directory, and the newest
// valid one found by a scan. The same files cumulus-train writes and resumes:
//
//   <dir>/step-00001200/
//     model.pt   Checkpoint::tensors: a pickled Dict[str, Tensor]; Python: torch.load("model.pt")
//     optim.pt   Checkpoint::optimizer_tensors and optimizer_scalars, pickled as
//                {"tensors": Dict[str, Tensor], "scalars": Dict[str, int|float|str]}
//     state.pb   Checkpoint::state (step, sampler position, RNG, world size, ...), protobuf
//     <name>     each of Checkpoint::files, byte for byte (addOptimizer's "optimizer.pt", or the
//                program's own: a replay buffer, a JSON of its schedule; cumulus-train with
//                comm.compression bf16 adds comm_residual.pt, every rank's error-feedback
//                residuals as a pickled [world size, n] float32 tensor,
//                DataParallel::errorFeedback)
//     MANIFEST   the size and SHA-256 of every file above, written last
//
// Commit protocol of a save: every file is written into step-00001200.tmp/ and fsynced, MANIFEST
// last, then the directory is renamed to step-00001200 and <dir> fsynced. A crash at any point
// leaves either the complete new checkpoint or none. A directory counts only if its MANIFEST
// verifies (every listed file present with its size and SHA-256); there is no "latest" pointer to
// go stale. After each save the `keep` newest valid checkpoints are kept and older ones removed.
//
// Typical loop (rank 0 writes, every rank reads):
//   cumulus::Checkpoints checkpoints(run_dir + "/checkpoints");
//   if (auto latest = checkpoints.loadLatest()) {
//     latest->restoreModule(*net); latest->restoreOptimizer(optimizer);
//     sampler.restore(latest->sampler()); latest->restoreRng(); step = latest->state.step;
//   }
//   ...
//   cumulus::Checkpoint c;
//   c.state.step = step; c.setSampler(sampler.state()); c.captureRng();
//   c.addModule(*net).addOptimizer(optimizer);
//   if (group->rank() == 0) checkpoints.save(c);
//
// One writer per directory. Thread-safety: a Checkpoints object is used from one thread; it runs
// at most one background save of its own (saveAsync), and loads may run meanwhile. A Checkpoint is
// a value (copying one shares its tensors' storage).

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cumulus/checkpoint_state.h"
#include "cumulus/errors.h"
#include "cumulus/sampler.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace cumulus {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
using OptimizerScalar = std::variant<int64_t, double, std::string>;

struct Checkpoint {
  CheckpointState state;
  NamedTensors tensors;                                      // model.pt; CPU tensors
  NamedTensors optimizer_tensors;                            // optim.pt "tensors"
  std::map<std::string, OptimizerScalar> optimizer_scalars;  // optim.pt "scalars"
  // Extra files: name -> bytes. A name is [A-Za-z0-9_.-]+, not starting with '.', and not one of
  // model.pt, optim.pt, state.pb, MANIFEST (save throws std::invalid_argument otherwise).
  std::map<std::string, std::string> files;

  // Appends deep CPU copies of the module's parameters and buffers (named_parameters, then
  // named_buffers, recursively) to `tensors`, each name prefixed with `prefix`. Returns *this.
  Checkpoint& addModule(const torch::nn::Module& module, const std::string& prefix = "");
  // Copies the tensors named `prefix` + name into the module's parameters and buffers, in place,
  // under no-grad. Throws CheckpointError naming the tensor for one that is missing, or whose
  // shape or dtype differs; tensors under `prefix` that the module does not have are an error too.
  void restoreModule(torch::nn::Module& module, const std::string& prefix = "") const;

  // files[name]: the optimizer's state (LibTorch's own serialization: param groups, every
  // parameter's state such as Adam's step, exp_avg and exp_avg_sq), so that a restored optimizer
  // takes bit-identical steps. restoreOptimizer puts back the groups' options (lr, betas, ...) too
  // for LibTorch's own optimizers (Adam, AdamW, SGD, RMSprop, Adagrad, LBFGS); for another
  // optimizer only the per-parameter state: build it with the same options. Returns *this.
  Checkpoint& addOptimizer(const torch::optim::Optimizer& optimizer,
                           const std::string& name = "optimizer.pt");
  // Throws CheckpointError if files[name] is missing or does not load into `optimizer`.
  void restoreOptimizer(torch::optim::Optimizer& optimizer,
                        const std::string& name = "optimizer.pt") const;

  // state.rng_state = the state of torch's default CPU generator (torch::rand, dropout, ...).
  void captureRng();
  // Puts it back; CheckpointError if state.rng_state is empty or malformed.
  void restoreRng() const;

  // state.epoch and state.sampler_cursor.
  void setSampler(const SamplerState& sampler);
  SamplerState sampler() const;

  // A named tensor of `tensors`, or an undefined tensor.
  torch::Tensor tensor(const std::string& name) const;
};

// A Checkpoint as one byte string, and back: the files its directory would hold (model.pt,
// optim.pt, state.pb and its extra files) behind their MANIFEST (each file's size and SHA-256).
// What a live peer sends when it heals another in place, through the same encoder and checks as a
// save and a load; a program may send it over a channel of its own. CPU-bound: pickling and
// hashing go over every tensor's bytes. Throws std::invalid_argument for a bad extra file name.
std::string packCheckpoint(const Checkpoint& checkpoint);
// Verifies the MANIFEST, every size and every SHA-256 before anything is decoded, and never reads
// outside `packed`. Throws CheckpointError "<source>: <reason>", e.g. "the state sent by rank 2:
// model.pt: SHA-256 mismatch (corrupt: changed in transit)".
Checkpoint unpackCheckpoint(std::string_view packed, const std::string& source);

class Checkpoints {
 public:
  // `dir` is created (with parents) by the first save. keep >= 1 (std::invalid_argument).
  explicit Checkpoints(std::string dir, size_t keep = 3);
  // Waits for a pending background save; an error no call surfaced goes to stderr (call
  // waitForPending() first to handle it).
  ~Checkpoints();
  Checkpoints(const Checkpoints&) = delete;
  Checkpoints& operator=(const Checkpoints&) = delete;

  const std::string& dir() const;
  // "step-00001200" (at least 8 digits).
  static std::string dirName(uint64_t step);

  // Writes and commits `checkpoint` as step checkpoint.state.step, then applies retention. Blocks
  // until the checkpoint is durable; first waits for a pending background save and rethrows its
  // error. Throws CheckpointError ("<dir>/step-00000100.tmp/model.pt: write: No space left on
  // device") if it does not commit: its .tmp directory is removed, older checkpoints untouched.
  SaveResult save(const Checkpoint& checkpoint);
  // Saves on a background thread and returns at once. The checkpoint must own its tensors
  // (addModule copies; so does training going on untouched). At most one save is in flight: this
  // waits up to `wait` for the previous one, and throws CheckpointError if it still runs or
  // failed (then `checkpoint` was not moved from).
  void saveAsync(Checkpoint&& checkpoint, std::chrono::milliseconds wait = kDefaultCheckpointWait);
  // Blocks until no background save is in flight or `timeout` passes (false). Rethrows, once, the
  // error of a background save that failed.
  bool waitForPending(std::chrono::milliseconds timeout = kDefaultCheckpointWait);
  bool pending() const;
  // Background saves that committed since the last call, oldest first.
  std::vector<SaveResult> takeCompleted();

  // The newest valid checkpoint, loaded (each file read and hashed once), or none. Newer
  // directories that fail verification or do not decode are skipped and reported in `warnings`
  // when given. A missing `dir` means none; a `dir` that cannot be listed throws CheckpointError.
  std::optional<Checkpoint> loadLatest(std::vector<CheckpointWarning>* warnings = nullptr);
  // The newest valid checkpoint's path and step, verified but not decoded.
  std::optional<CheckpointInfo> latestValid(std::vector<CheckpointWarning>* warnings = nullptr);
  // Loads the checkpoint directory `path` (verified first). Throws CheckpointError naming it and
  // the reason for an invalid or undecodable checkpoint.
  Checkpoint load(const std::string& path);
  // Every directory step-N, valid or not, newest first (no verification).
  std::vector<CheckpointInfo> list();
  // Removes <dir>/step-*.tmp left by an interrupted save; returns the removed paths.
  std::vector<std::string> removeStaleTemporaries();
  // For the writer, before training: creates dir(), writes, fsyncs and removes a small probe file
  // there, and requires room for what the checkpoints take at their peak when each new one takes
  // about `bytes_each` bytes (the model's parameters and buffers plus the optimizer's state): the
  // `keep` kept and the next one being written, which is written before the oldest is removed.
  // The checkpoints already in dir() count as room, since the saves replace them in turn. Throws
  // UserError (exit 2) naming the directory and the failed operation ("/proc/ck: mkdir: No such
  // file or directory"), or the bytes needed and free and what to do (a lower keep that fits, a
  // larger disk), so that a run that could never save stops before it trains rather than after.
  // `keep_name` is how that message names the number kept (a program's own option, say).
  void checkRoom(uint64_t bytes_each, const std::string& keep_name = "keep");

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumulus
