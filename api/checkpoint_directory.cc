// Checkpoints, a directory of them (<cumulus/checkpoint.h>), over trainer::CheckpointManager and
// the POSIX file system. Every failure leaves as a CheckpointError naming the path;
// std::invalid_argument only for the caller's mistakes the header names (keep < 1, a bad extra
// file name).

#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "api/checkpoint_convert.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_snapshot.h"
#include "checkpoint/file_system.h"
#include "cumulus/checkpoint.h"

namespace cumulus {
namespace {

// Runs `fn`; any error but a CheckpointError becomes one that names `path`.
template <typename Fn>
auto guarded(const std::string& path, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const CheckpointError&) {
    throw;
  } catch (const checkpoint::FileSystemError& e) {
    throw CheckpointError(e.what(), e.errorCode());  // "<path>: <operation>: <errno text>"
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": " + e.what());
  }
}

void checkFileNames(const Checkpoint& checkpoint) {
  for (const auto& [name, bytes] : checkpoint.files) checkpoint::checkExtraFileName(name);
}

void appendWarnings(const std::vector<CheckpointWarning>& found,
                    std::vector<CheckpointWarning>* warnings) {
  if (warnings != nullptr) warnings->insert(warnings->end(), found.begin(), found.end());
}

size_t checkedKeep(size_t keep) {
  if (keep < 1) {
    throw std::invalid_argument(
        "Checkpoints: keep must be >= 1 (the newest valid checkpoint is "
        "always kept), got " +
        std::to_string(keep));
  }
  return keep;
}

}  // namespace

std::string packCheckpoint(const Checkpoint& checkpoint) {
  checkFileNames(checkpoint);
  Checkpoint copy = checkpoint;  // shares the tensors' storage
  return checkpoint::packCheckpointFiles(checkpoint::encodeSnapshot(toSnapshot(std::move(copy))));
}

Checkpoint unpackCheckpoint(std::string_view packed, const std::string& source) {
  checkpoint::VerifiedCheckpoint verified;
  try {
    verified = checkpoint::unpackCheckpointFiles(
        packed, {checkpoint::kModelFile, checkpoint::kOptimizerFile, checkpoint::kStateFile});
  } catch (const checkpoint::InvalidCheckpoint& e) {
    throw CheckpointError(source + ": " + e.what());
  }
  try {
    return fromSnapshot(checkpoint::decodeSnapshot(verified.files, source, ": "));
  } catch (const c10::Error& e) {
    throw CheckpointError(source + ": " + e.what_without_backtrace());
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(source + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw CheckpointError(e.what());  // it names the source and the file
  }
}

struct Checkpoints::Impl {
  Impl(std::string dir, size_t keep) : manager(std::move(dir), checkedKeep(keep), fs) {}
  checkpoint::PosixFileSystem fs;  // before the manager, which uses it
  checkpoint::CheckpointManager manager;
};

Checkpoints::Checkpoints(std::string dir, size_t keep)
    : impl_(std::make_unique<Impl>(std::move(dir), keep)) {}

Checkpoints::~Checkpoints() = default;

const std::string& Checkpoints::dir() const { return impl_->manager.dir(); }

std::string Checkpoints::dirName(uint64_t step) {
  return checkpoint::CheckpointManager::dirName(step);
}

SaveResult Checkpoints::save(const Checkpoint& checkpoint) {
  checkFileNames(checkpoint);
  Checkpoint copy = checkpoint;  // shares the tensors and copies the files' bytes
  fillSaveDefaults(copy.state);
  const checkpoint::CheckpointSnapshot snapshot = toSnapshot(std::move(copy));
  const std::string path = dir() + "/" + dirName(checkpoint.state.step);
  return guarded(path, [&] { return impl_->manager.save(snapshot); });
}

void Checkpoints::saveAsync(Checkpoint&& checkpoint, std::chrono::milliseconds wait) {
  checkFileNames(checkpoint);
  const CheckpointState original = checkpoint.state;
  const std::string path = dir() + "/" + dirName(original.step);
  fillSaveDefaults(checkpoint.state);
  checkpoint::CheckpointSnapshot snapshot = toSnapshot(std::move(checkpoint));
  try {
    guarded(path, [&] { impl_->manager.saveAsync(std::move(snapshot), wait); });
  } catch (...) {
    // The manager did not take the snapshot: give the caller its checkpoint back, as it was.
    checkpoint = fromSnapshot(std::move(snapshot));
    checkpoint.state = original;
    throw;
  }
}

bool Checkpoints::waitForPending(std::chrono::milliseconds timeout) {
  return guarded(dir(), [&] { return impl_->manager.waitForPending(timeout); });
}

bool Checkpoints::pending() const { return impl_->manager.pending(); }

std::vector<SaveResult> Checkpoints::takeCompleted() { return impl_->manager.takeCompleted(); }

std::optional<Checkpoint> Checkpoints::loadLatest(std::vector<CheckpointWarning>* warnings) {
  std::vector<CheckpointWarning> found;
  auto latest = guarded(dir(), [&] { return impl_->manager.loadLatestValid(found); });
  appendWarnings(found, warnings);
  if (!latest) return std::nullopt;
  return fromSnapshot(std::move(latest->second));
}

std::optional<CheckpointInfo> Checkpoints::latestValid(std::vector<CheckpointWarning>* warnings) {
  std::vector<CheckpointWarning> found;
  auto latest = guarded(dir(), [&] { return impl_->manager.latestValid(found); });
  appendWarnings(found, warnings);
  return latest;
}

Checkpoint Checkpoints::load(const std::string& path) {
  return fromSnapshot(guarded(path, [&] { return impl_->manager.load(path); }));
}

std::vector<CheckpointInfo> Checkpoints::list() {
  return guarded(dir(), [&] { return impl_->manager.list(); });
}

void Checkpoints::checkRoom(uint64_t bytes_each, const std::string& keep_name) {
  impl_->manager.checkRoom(bytes_each, keep_name);  // a UserError, not a CheckpointError: exit 2
}

std::vector<std::string> Checkpoints::removeStaleTemporaries() {
  return guarded(dir(), [&] { return impl_->manager.removeStaleTemporaries(); });
}

}  // namespace cumulus
