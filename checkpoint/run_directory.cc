// One job at a time in a run directory (<cumulus/run_directory.h>). No LibTorch.

#include "cumulus/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <utility>

#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_state_proto.h"
#include "proto/checkpoint.pb.h"

namespace cumulus {
namespace {

constexpr char kLockFile[] = "cumulus.lock";

std::string errnoText(int error) { return std::strerror(error); }

std::string utcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// The lock file's record: "key=value" lines (program, pid, host, started, run_id).
using Holder = std::map<std::string, std::string>;

Holder readHolder(int fd) {
  std::string text;
  char buffer[1024];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof(buffer), at);
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    at += n;
    if (text.size() > 64 * 1024) break;  // not ours: nothing more to learn from it
  }
  Holder holder;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) holder[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return holder;
}

std::string field(const Holder& holder, const char* key) {
  const auto it = holder.find(key);
  return it == holder.end() || it->second.empty() ? "?" : it->second;
}

// "cumulus-train, pid 4242 on host node-1"
std::string describe(const Holder& holder) {
  return field(holder, "program") + ", pid " + field(holder, "pid") + " on host " +
         field(holder, "host");
}

void writeHolder(int fd, const std::string& path, const RunDirectoryLockOptions& options) {
  std::ostringstream record;
  record << "program=" << options.program << "\npid=" << ::getpid() << "\nhost=" << hostName()
         << "\nstarted=" << utcNow() << "\nrun_id=" << options.run_id << "\n";
  const std::string text = record.str();
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    throw UserError(path + ": cannot write the run directory's lock: " + errnoText(errno));
  }
}

}  // namespace

RunDirectoryLock::RunDirectoryLock(const std::string& dir, RunDirectoryLockOptions options)
    : path_(dir + "/" + kLockFile) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw UserError("cannot create " + dir + ": " + error.message() +
                    "; it must be a directory this job can write");
  }
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw UserError("cannot open " + path_ + ": " + errnoText(errno) + "; " + dir +
                    " must be a directory this job can write");
  }
  // A holder of this same job is an earlier process of it that is still exiting: wait for it. Any
  // other holder is another job, refused at once. (flock has no timed wait: ask every 50 ms.)
  const auto deadline = std::chrono::steady_clock::now() + options.same_run_wait;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    const Holder holder = readHolder(fd_);
    if (err != EWOULDBLOCK) {
      release();
      throw UserError(path_ + ": cannot lock the run directory: " + errnoText(err));
    }
    const bool same_run = !options.run_id.empty() && field(holder, "run_id") == options.run_id;
    if (!same_run || std::chrono::steady_clock::now() >= deadline) {
      release();
      throw RunDirectoryBusy(
          dir + " is in use by " + describe(holder) + " since " + field(holder, "started") +
          " (run id " + field(holder, "run_id") + ")" +
          (same_run ? ", a process of this same job that did not exit within " +
                          std::to_string(options.same_run_wait.count() / 1000) + " s"
                    : "") +
          ": wait for that job to end or stop it, or give this run another directory "
          "(trainer.run_dir)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The lock is ours. A record left in the file is a holder that died without releasing it.
  const Holder previous = readHolder(fd_);
  if (previous.count("pid") != 0) {
    note_ = "took over " + dir + " from " + describe(previous) + " (started " +
            field(previous, "started") + "), which ended without releasing it";
  }
  try {
    writeHolder(fd_, path_, options);
  } catch (...) {
    release();
    throw;
  }
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0 && ::ftruncate(fd_, 0) != 0) {
    // Best effort: the next holder then says it took the lock over, which is harmless.
  }
  release();
}

void RunDirectoryLock::release() {
  if (fd_ >= 0) ::close(fd_);  // drops the flock
  fd_ = -1;
}

RunDirectoryLock::RunDirectoryLock(RunDirectoryLock&& other) noexcept
    : path_(std::move(other.path_)), note_(std::move(other.note_)), fd_(other.fd_) {
  other.fd_ = -1;
}

RunDirectoryLock& RunDirectoryLock::operator=(RunDirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0 && ::ftruncate(fd_, 0) != 0) {
    }
    release();
    path_ = std::move(other.path_);
    note_ = std::move(other.note_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

std::optional<CheckpointOrigin> newestCheckpointOrigin(const std::string& checkpoint_dir) {
  std::error_code error;
  std::optional<uint64_t> newest;
  for (std::filesystem::directory_iterator it(checkpoint_dir, error), end; !error && it != end;
       it.increment(error)) {
    const std::optional<uint64_t> step =
        checkpoint::checkpointDirStep(it->path().filename().string());
    if (step && (!newest || *step > *newest)) newest = step;
  }
  if (!newest) return std::nullopt;
  CheckpointOrigin origin;
  origin.path = checkpoint_dir + "/" + checkpoint::checkpointDirName(*newest);
  std::ifstream file(origin.path + "/state.pb", std::ios::binary);
  proto::CheckpointState state;
  if (!file || !state.ParseFromIstream(&file)) return std::nullopt;
  origin.state = checkpoint::stateFromProto(state);
  return origin;
}

void checkSameExperiment(const std::string& checkpoint_dir, const std::string& digest,
                         const std::string& choices) {
  const std::optional<CheckpointOrigin> origin = newestCheckpointOrigin(checkpoint_dir);
  if (!origin || origin->state.config_digest.empty() || digest.empty() ||
      origin->state.config_digest == digest) {
    return;
  }
  throw ExperimentMismatch(checkpoint_dir + " holds checkpoints of another experiment (newest " +
                           origin->path + ", config digest " + origin->state.config_digest +
                           "; this experiment's is " + digest + "): " + choices);
}

}  // namespace cumulus
