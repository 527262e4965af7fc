#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <functional>

#include "checkpoint/checkpoint_manifest.h"
#include "cumulus/errors.h"

namespace cumulus::checkpoint {
namespace {

constexpr char kStepPrefix[] = "step-";
constexpr char kTmpSuffix[] = ".tmp";

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const std::vector<std::string>& requiredFiles() {
  static const std::vector<std::string> files = {kModelFile, kOptimizerFile, kStateFile};
  return files;
}

bool isTemporaryName(const std::string& name) {
  const size_t suffix = sizeof(kTmpSuffix) - 1;
  return name.compare(0, sizeof(kStepPrefix) - 1, kStepPrefix) == 0 && name.size() > suffix &&
         name.compare(name.size() - suffix, suffix, kTmpSuffix) == 0;
}

std::string baseName(const std::string& path) {
  const size_t slash = path.find_last_not_of('/');
  const std::string trimmed = path.substr(0, slash == std::string::npos ? 0 : slash + 1);
  return trimmed.substr(trimmed.rfind('/') + 1);  // npos + 1 == 0
}

// "12.3 MiB (12902604 bytes)": a person reads the first part, a script the second.
std::string byteText(uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f MiB (%" PRIu64 " bytes)",
                static_cast<double>(bytes) / (1024.0 * 1024.0), bytes);
  return text;
}

uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? UINT64_MAX : sum;
}

uint64_t saturatingMul(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}

// What checkRoom found short.
struct RoomShortage {
  uint64_t available = 0;  // free for this user
  uint64_t there = 0;      // in the checkpoint directories already there
  size_t checkpoints = 0;  // step-N directories there
  uint64_t each = 0;       // a new checkpoint
  uint64_t keep = 0;
  uint64_t needed = 0;        // at the peak
  uint64_t fitting_keep = 0;  // the largest lower keep that fits; 0: none
  uint64_t fitting_needed = 0;
};

std::string counted(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// How much is free, how much the run needs, and what to do. Deleting the checkpoints there gives
// nothing: they already count as room (and a resume needs its own).
std::string shortageText(const std::string& dir, const RoomShortage& r,
                         const std::string& keep_name) {
  std::string text = dir + " has " + byteText(r.available) + " free";
  if (r.there > 0) {
    const std::string what = r.checkpoints == 0 ? std::string("unfinished saves (.tmp)")
                             : r.checkpoints == 1
                                 ? std::string("its checkpoint")
                                 : "its " + std::to_string(r.checkpoints) + " checkpoints";
    text += " and " + byteText(r.there) + " in " + what +
            ", which the saves replace in turn, so room for " +
            byteText(saturatingAdd(r.available, r.there)) + ";";
  } else {
    text += ",";
  }
  text += " but keeping " + counted(r.keep, "checkpoint", "checkpoints") + " of this model (" +
          keep_name + ") while the next one is written takes up to " + byteText(r.needed) +
          ", about " + byteText(r.each) + " each: ";
  if (r.fitting_keep > 0) {
    text += "lower " + keep_name + " to " + std::to_string(r.fitting_keep) + " (up to " +
            byteText(r.fitting_needed) + "), or ";
  }
  return text + (r.checkpoints > 0 ? "move the directory with its checkpoints to a larger disk"
                                   : "choose a directory on a larger disk");
}

}  // namespace

uint64_t peakCheckpointBytes(uint64_t each, uint64_t keep, const std::vector<uint64_t>& existing) {
  const uint64_t n = existing.size();
  uint64_t all = 0;
  for (uint64_t bytes : existing) all = saturatingAdd(all, bytes);
  // Before the first save: every existing one.
  uint64_t most = all;
  // Before the save that follows m new ones (1 <= m <= keep): those and the keep - m newest
  // existing ones. While keep - m >= n that is every existing one, the most at m = keep - n.
  if (keep > n) most = std::max(most, saturatingAdd(saturatingMul(keep - n, each), all));
  uint64_t newest = 0;  // the j newest existing ones
  for (uint64_t j = 0; j < std::min(n, keep); ++j) {
    most = std::max(most, saturatingAdd(saturatingMul(keep - j, each), newest));
    newest = saturatingAdd(newest, existing[j]);
  }
  return saturatingAdd(most, each);  // and the one being written
}

CheckpointManager::CheckpointManager(std::string dir, size_t keep, FileSystem& fs)
    : dir_(std::move(dir)), keep_(keep), fs_(fs) {
  assert(keep_ >= 1 && "the newest valid checkpoint is always kept");
}

CheckpointManager::~CheckpointManager() {
  if (worker_.joinable()) worker_.join();
  base::MutexLock lock(mutex_);
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cumulus: background checkpoint save failed, never reported: %s\n",
                   e.what());
    }
  }
}

std::string CheckpointManager::dirName(uint64_t step) { return checkpointDirName(step); }

void CheckpointManager::checkRoom(uint64_t bytes_each, const std::string& keep_name) {
  const std::string probe = dir_ + "/.cumulus-write-test";
  uint64_t available = 0;
  std::vector<uint64_t> existing;  // newest first
  uint64_t there = 0;              // theirs and that of the .tmp directories the next save removes
  try {
    ensureDir();
    fs_.writeFile(probe, "Cumulus checks that checkpoints can be written here.\n");
    fs_.removeAll(probe);
    available = fs_.availableBytes(dir_);
    for (const CheckpointInfo& info : list()) {
      existing.push_back(fs_.usedBytes(info.path));
      there = saturatingAdd(there, existing.back());
    }
    for (const DirEntry& entry : fs_.list(dir_)) {
      if (isTemporaryName(entry.name)) {
        there = saturatingAdd(there, fs_.usedBytes(dir_ + "/" + entry.name));
      }
    }
  } catch (const FileSystemError& e) {
    throw UserError("checkpoints cannot be written to " + dir_ + " (" + e.what() +
                    "): choose a writable directory for them");
  }
  RoomShortage room;
  room.available = available;
  room.there = there;
  room.checkpoints = existing.size();
  room.each = bytes_each;
  room.keep = keep_;
  room.needed = peakCheckpointBytes(bytes_each, keep_, existing);
  const uint64_t total = saturatingAdd(available, there);
  if (room.needed <= total) return;
  // The largest keep that fits, if any: the peak never falls as keep grows.
  uint64_t low = 1, high = keep_ - 1;
  while (low <= high) {
    const uint64_t middle = low + (high - low) / 2;
    const uint64_t needed = peakCheckpointBytes(bytes_each, middle, existing);
    if (needed <= total) {
      room.fitting_keep = middle;
      room.fitting_needed = needed;
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  throw UserError(shortageText(dir_, room, keep_name));
}

bool CheckpointManager::waitLocked(base::MutexLock& lock, std::chrono::milliseconds timeout) {
  return done_cv_.wait_for(lock, timeout,
                           [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !in_flight_; });
}

void CheckpointManager::rethrowPendingError(base::MutexLock& lock) {
  if (!error_) return;
  std::exception_ptr error = error_;
  error_ = nullptr;
  std::rethrow_exception(error);
}

SaveResult CheckpointManager::save(const CheckpointSnapshot& snapshot) {
  {
    base::MutexLock lock(mutex_);
    if (!waitLocked(lock, kDefaultCheckpointWait)) {
      throw CheckpointError(dir_ + "/" + in_flight_name_ +
                            ": a background save is still running; step " +
                            std::to_string(snapshot.state.step()) + " was not saved");
    }
    rethrowPendingError(lock);
  }
  if (worker_.joinable()) worker_.join();
  return write(snapshot);
}

void CheckpointManager::saveAsync(CheckpointSnapshot&& snapshot, std::chrono::milliseconds wait) {
  {
    base::MutexLock lock(mutex_);
    if (!waitLocked(lock, wait)) {
      throw CheckpointError(dir_ + "/" + in_flight_name_ +
                            ": a background save is still running after " +
                            std::to_string(wait.count()) + " ms; step " +
                            std::to_string(snapshot.state.step()) + " was not saved");
    }
    rethrowPendingError(lock);
    in_flight_ = true;
    in_flight_name_ = dirName(snapshot.state.step());
  }
  if (worker_.joinable()) worker_.join();
  try {
    worker_ = std::thread([this, snapshot = std::move(snapshot)]() mutable {
      SaveResult result;
      std::exception_ptr error;
      try {
        result = write(snapshot);
      } catch (...) {
        error = std::current_exception();
      }
      snapshot = CheckpointSnapshot();  // free the copy before the next one can be taken
      {
        base::MutexLock lock(mutex_);
        in_flight_ = false;
        in_flight_name_.clear();
        if (error) {
          error_ = error;
        } else {
          completed_.push_back(std::move(result));
        }
      }
      done_cv_.notify_all();
    });
  } catch (...) {
    base::MutexLock lock(mutex_);
    in_flight_ = false;
    in_flight_name_.clear();
    throw;
  }
}

bool CheckpointManager::waitForPending(std::chrono::milliseconds timeout) {
  {
    base::MutexLock lock(mutex_);
    if (!waitLocked(lock, timeout)) return false;
    rethrowPendingError(lock);
  }
  if (worker_.joinable()) worker_.join();
  return true;
}

bool CheckpointManager::pending() const {
  base::MutexLock lock(mutex_);
  return in_flight_;
}

std::vector<SaveResult> CheckpointManager::takeCompleted() {
  base::MutexLock lock(mutex_);
  return std::exchange(completed_, {});
}

// mkdir -p dir_, with each created directory's parent fsynced.
void CheckpointManager::ensureDir() {
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir_.find('/', pos + 1);
    prefix = dir_.substr(0, pos);
    if (prefix.empty() || fs_.exists(prefix)) continue;
    try {
      fs_.createDir(prefix);
    } catch (const FileSystemError& e) {
      if (e.errorCode() != EEXIST) throw;
      continue;
    }
    // A new directory's own name must be durable too, or a crash can lose the whole tree.
    const size_t slash = prefix.rfind('/');
    fs_.syncDir(slash == std::string::npos ? "." : slash == 0 ? "/" : prefix.substr(0, slash));
  }
}

SaveResult CheckpointManager::write(const CheckpointSnapshot& snapshot) {
  SaveResult result;
  result.step = snapshot.state.step();
  result.path = dir_ + "/" + dirName(result.step);
  const std::string tmp = result.path + kTmpSuffix;

  Clock::time_point start = Clock::now();
  std::map<std::string, std::string> files;
  try {
    files = encodeSnapshot(snapshot);
  } catch (const std::exception& e) {
    throw CheckpointError(result.path + ": cannot encode the snapshot: " + e.what());
  }
  result.encode_seconds = secondsSince(start);

  start = Clock::now();
  bool renamed = false;
  std::string replaced;
  try {
    ensureDir();
    try {
      removeStaleTemporaries();
    } catch (const FileSystemError& e) {
      // Leftovers of an older crash must not stop this save.
      result.warnings.push_back({dir_, std::string("cannot remove a stale .tmp: ") + e.what()});
    }
    fs_.removeAll(tmp);
    fs_.createDir(tmp);
    std::vector<ManifestEntry> entries;
    for (const auto& [name, bytes] : files) {
      fs_.writeFile(tmp + "/" + name, bytes);
      entries.push_back(describeFile(name, bytes));
      result.bytes += bytes.size();
    }
    // MANIFEST last: its presence is what makes the directory a checkpoint.
    const std::string manifest = encodeManifest(entries);
    fs_.writeFile(tmp + "/" + kManifestName, manifest);
    result.bytes += manifest.size();
    fs_.syncDir(tmp);
    replaced = commit(tmp, result.path);
    renamed = true;
    fs_.syncDir(dir_);
  } catch (const FileSystemError& e) {
    std::string message = "saving checkpoint " + result.path + " failed: " + e.what();
    if (renamed) {
      message += " (after the rename: the checkpoint is complete but may not survive a crash)";
    } else {
      try {
        fs_.removeAll(tmp);
        message += " (removed " + tmp + "; older checkpoints are untouched)";
      } catch (const std::exception& cleanup) {
        message += std::string("; removing ") + tmp + " failed too: " + cleanup.what();
      }
    }
    throw CheckpointError(message, e.errorCode());
  }
  if (!replaced.empty()) {
    try {
      fs_.removeAll(replaced);
    } catch (const FileSystemError& e) {
      result.warnings.push_back(
          {replaced, std::string("cannot remove the replaced copy: ") + e.what()});
    }
  }
  result.write_seconds = secondsSince(start);

  start = Clock::now();
  for (CheckpointWarning& w : applyRetention(result.path)) result.warnings.push_back(std::move(w));
  result.retention_seconds = secondsSince(start);
  return result;
}

// Puts the complete `tmp` in place as `final_path`. A directory already at `final_path` (a save
// of the same step again, after a resume) is swapped out atomically where renameat2 works;
// elsewhere it is moved aside first, which leaves a short window without that step (older
// checkpoints stay valid throughout). Returns the path now holding the replaced directory, for
// the caller to remove once the parent directory is synced, or "" if nothing was replaced.
std::string CheckpointManager::commit(const std::string& tmp, const std::string& final_path) {
  if (!fs_.exists(final_path)) {
    fs_.rename(tmp, final_path);
    return "";
  }
  try {
    fs_.exchange(tmp, final_path);
    return tmp;
  } catch (const FileSystemError& e) {
    if (e.errorCode() != EINVAL && e.errorCode() != ENOSYS && e.errorCode() != ENOTSUP) throw;
  }
  const std::string replaced = final_path + ".old" + kTmpSuffix;
  fs_.removeAll(replaced);
  fs_.rename(final_path, replaced);
  try {
    fs_.rename(tmp, final_path);
  } catch (const FileSystemError&) {
    try {
      fs_.rename(replaced, final_path);  // put the old one back rather than lose it
    } catch (const FileSystemError&) {
      // The error that matters is the first one; the old copy stays under `replaced`.
    }
    throw;
  }
  return replaced;
}

std::vector<CheckpointInfo> CheckpointManager::list() {
  std::vector<CheckpointInfo> out;
  if (!fs_.exists(dir_)) return out;
  for (const DirEntry& entry : fs_.list(dir_)) {
    if (!entry.is_dir) continue;
    if (const auto step = checkpointDirStep(entry.name))
      out.push_back({dir_ + "/" + entry.name, *step});
  }
  // Newest first; equal steps ("step-1" and "step-00000001") by name, for a stable order.
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  return out;
}

// Verifies step directories newest first and hands each valid one to `accept` until it returns
// true (accept may throw CheckpointError to reject one); every rejection becomes a warning.
std::optional<CheckpointInfo> CheckpointManager::scanNewestFirst(
    std::vector<CheckpointWarning>& warnings,
    const std::function<void(const CheckpointInfo&, const VerifiedCheckpoint&)>& accept) {
  for (const CheckpointInfo& info : list()) {
    try {
      const VerifiedCheckpoint verified = verifyCheckpoint(fs_, info.path, requiredFiles());
      accept(info, verified);
      for (const std::string& name : verified.unlisted) {
        warnings.push_back({info.path, "ignoring " + name + ": not listed in MANIFEST"});
      }
      return info;
    } catch (const InvalidCheckpoint& e) {
      warnings.push_back({info.path, std::string("invalid checkpoint, skipped: ") + e.what()});
    } catch (const FileSystemError& e) {
      warnings.push_back({info.path, std::string("unreadable checkpoint, skipped: ") + e.what()});
    } catch (const CheckpointError& e) {
      warnings.push_back({info.path, std::string("undecodable checkpoint, skipped: ") + e.what()});
    }
  }
  return std::nullopt;
}

std::optional<CheckpointInfo> CheckpointManager::latestValid(
    std::vector<CheckpointWarning>& warnings) {
  return scanNewestFirst(warnings, [](const CheckpointInfo&, const VerifiedCheckpoint&) {});
}

namespace {

// Decodes verified bytes of the checkpoint at `path` (step `step`); throws CheckpointError.
CheckpointSnapshot decodeVerified(const VerifiedCheckpoint& verified, const std::string& path,
                                  uint64_t step) {
  CheckpointSnapshot snapshot;
  try {
    snapshot = decodeSnapshot(verified.files, path);
  } catch (const std::exception& e) {
    throw CheckpointError(e.what());
  }
  if (snapshot.state.step() != step) {
    throw CheckpointError(path + "/" + kStateFile + ": step " +
                          std::to_string(snapshot.state.step()) +
                          " does not match the directory name");
  }
  return snapshot;
}

}  // namespace

CheckpointSnapshot CheckpointManager::load(const std::string& path) {
  const std::optional<uint64_t> step = checkpointDirStep(baseName(path));
  if (!step) throw CheckpointError(path + ": not a checkpoint directory name (step-<number>)");
  VerifiedCheckpoint verified;
  try {
    verified = verifyCheckpoint(fs_, path, requiredFiles());
  } catch (const InvalidCheckpoint& e) {
    throw CheckpointError(path + ": invalid checkpoint: " + e.what());
  } catch (const FileSystemError& e) {
    throw CheckpointError(path + ": unreadable checkpoint: " + e.what());
  }
  return decodeVerified(verified, path, *step);
}

std::optional<std::pair<CheckpointInfo, CheckpointSnapshot>> CheckpointManager::loadLatestValid(
    std::vector<CheckpointWarning>& warnings) {
  CheckpointSnapshot snapshot;
  const std::optional<CheckpointInfo> info =
      scanNewestFirst(warnings, [&](const CheckpointInfo& info, const VerifiedCheckpoint& v) {
        snapshot = decodeVerified(v, info.path, info.step);
      });
  if (!info) return std::nullopt;
  return std::make_pair(*info, std::move(snapshot));
}

std::vector<std::string> CheckpointManager::removeStaleTemporaries() {
  std::vector<std::string> removed;
  if (!fs_.exists(dir_)) return removed;
  std::string in_flight;
  {
    base::MutexLock lock(mutex_);
    in_flight = in_flight_name_;
  }
  for (const DirEntry& entry : fs_.list(dir_)) {
    if (!isTemporaryName(entry.name)) continue;
    // The background save's own directories (step-N.tmp, step-N.old.tmp) are not stale.
    if (!in_flight.empty() && entry.name.compare(0, in_flight.size() + 1, in_flight + ".") == 0) {
      continue;
    }
    fs_.removeAll(dir_ + "/" + entry.name);
    removed.push_back(dir_ + "/" + entry.name);
  }
  return removed;
}

std::vector<CheckpointWarning> CheckpointManager::applyRetention(const std::string& just_saved) {
  std::vector<CheckpointWarning> warnings;
  std::vector<CheckpointInfo> all;
  try {
    all = list();
  } catch (const FileSystemError& e) {
    return {{dir_, std::string("retention skipped: ") + e.what()}};
  }
  size_t valid = 0;
  uint64_t oldest_kept = 0;
  for (const CheckpointInfo& info : all) {
    if (valid == keep_) break;
    bool ok = info.path == just_saved;  // written and fsynced just now
    if (!ok) {
      try {
        verifyCheckpoint(fs_, info.path, requiredFiles());
        ok = true;
      } catch (const std::exception& e) {
        warnings.push_back({info.path, std::string("invalid checkpoint kept (not older than the "
                                                   "kept ones): ") +
                                           e.what()});
      }
    }
    if (ok) {
      ++valid;
      oldest_kept = info.step;
    }
  }
  // Remove only what is verifiably older than K valid checkpoints, never the one just saved.
  if (valid < keep_) return warnings;
  for (const CheckpointInfo& info : all) {
    if (info.step >= oldest_kept || info.path == just_saved) continue;
    try {
      fs_.removeAll(info.path);
    } catch (const FileSystemError& e) {
      warnings.push_back({info.path, std::string("retention could not remove it: ") + e.what()});
    }
  }
  return warnings;
}

}  // namespace cumulus::checkpoint
