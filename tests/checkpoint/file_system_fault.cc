#include "tests/checkpoint/file_system_fault.h"

#include <algorithm>

namespace cumulus::checkpoint {
namespace {

bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void FaultInjectingFileSystem::failWritesAfter(uint64_t bytes, int error_code) {
  base::MutexLock lock(mutex_);
  write_limit_ = written_ + bytes;
  write_error_ = error_code;
}

void FaultInjectingFileSystem::failSyncOf(const std::string& suffix, int error_code) {
  base::MutexLock lock(mutex_);
  sync_fault_ = PathFault{suffix, error_code};
}

void FaultInjectingFileSystem::failRenameTo(const std::string& suffix, int error_code, int times) {
  base::MutexLock lock(mutex_);
  rename_fault_ = PathFault{suffix, error_code, times};
}

void FaultInjectingFileSystem::disableExchange() {
  base::MutexLock lock(mutex_);
  exchange_disabled_ = true;
}

void FaultInjectingFileSystem::reportAvailable(uint64_t bytes) {
  base::MutexLock lock(mutex_);
  available_ = bytes;
}

uint64_t FaultInjectingFileSystem::availableBytes(const std::string& path) {
  {
    base::MutexLock lock(mutex_);
    if (available_) return *available_;
  }
  return base_.availableBytes(path);
}

void FaultInjectingFileSystem::clear() {
  base::MutexLock lock(mutex_);
  available_.reset();
  exchange_disabled_ = false;
  write_limit_.reset();
  sync_fault_.reset();
  rename_fault_.reset();
}

uint64_t FaultInjectingFileSystem::bytesWritten() const {
  base::MutexLock lock(mutex_);
  return written_;
}

void FaultInjectingFileSystem::check(const std::optional<PathFault>& fault, const std::string& path,
                                     const std::string& operation) {
  if (fault && endsWith(path, fault->suffix)) {
    throw FileSystemError(path, operation, fault->error_code);
  }
}

void FaultInjectingFileSystem::writeFile(const std::string& path, std::string_view data) {
  size_t allowed = data.size();
  int error_code = 0;
  std::optional<PathFault> sync_fault;
  {
    base::MutexLock lock(mutex_);
    if (write_limit_ && written_ + data.size() > *write_limit_) {
      allowed = static_cast<size_t>(*write_limit_ - std::min(written_, *write_limit_));
      error_code = write_error_;
    }
    written_ += allowed;
    sync_fault = sync_fault_;
  }
  if (error_code != 0) {
    // What a full disk leaves behind: the file with the prefix that fitted.
    base_.writeFile(path, data.substr(0, allowed));
    throw FileSystemError(path, "write", error_code);
  }
  base_.writeFile(path, data);
  check(sync_fault, path, "fsync");
}

void FaultInjectingFileSystem::rename(const std::string& from, const std::string& to) {
  {
    base::MutexLock lock(mutex_);
    if (rename_fault_ && rename_fault_->times != 0 && endsWith(to, rename_fault_->suffix)) {
      --rename_fault_->times;
      throw FileSystemError(to, "rename from " + from, rename_fault_->error_code);
    }
  }
  base_.rename(from, to);
}

void FaultInjectingFileSystem::exchange(const std::string& a, const std::string& b) {
  {
    base::MutexLock lock(mutex_);
    if (exchange_disabled_) throw FileSystemError(b, "exchange with " + a, ENOSYS);
    if (rename_fault_ && rename_fault_->times != 0 && endsWith(b, rename_fault_->suffix)) {
      --rename_fault_->times;
      throw FileSystemError(b, "exchange with " + a, rename_fault_->error_code);
    }
  }
  base_.exchange(a, b);
}

void FaultInjectingFileSystem::syncDir(const std::string& path) {
  std::optional<PathFault> sync_fault;
  {
    base::MutexLock lock(mutex_);
    sync_fault = sync_fault_;
  }
  check(sync_fault, path, "fsync directory");
  base_.syncDir(path);
}

}  // namespace cumulus::checkpoint
