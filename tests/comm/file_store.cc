#include "file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "comm/error.h"

namespace cumulus::comm::testing {
namespace {

std::string escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '/')
      out += "%2F";
    else if (c == '%')
      out += "%25";
    else
      out += c;
  }
  return out;
}

std::string unescape(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '%' && i + 2 < name.size()) {
      out += name.compare(i, 3, "%2F") == 0 ? '/' : '%';
      i += 2;
    } else {
      out += name[i];
    }
  }
  return out;
}

class DirLock {
 public:
  explicit DirLock(const std::string& dir)
      : fd_(::open((dir + "/.lock").c_str(), O_CREAT | O_RDWR, 0600)) {
    ::flock(fd_, LOCK_EX);
  }
  ~DirLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

 private:
  int fd_;
};

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {}

std::string FileStore::pathOf(const std::string& key) const {
  return directory_ + "/k-" + escape(key);
}

void FileStore::set(const std::string& key, const Bytes& value) {
  const std::string tmp = directory_ + "/.tmp-" + std::to_string(::getpid()) + "-" +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary);
    out << value;
  }
  ::rename(tmp.c_str(), pathOf(key).c_str());
}

std::optional<Bytes> FileStore::tryGet(const std::string& key) {
  std::ifstream in(pathOf(key), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Bytes FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  auto value = tryGet(key);
  if (!value)
    throw CommError(ErrorKind::kTimeout, "store.get", 0, -1, "key '" + key + "' vanished");
  return *value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  DirLock lock(directory_);
  auto current = tryGet(key);
  const int64_t value = (current ? std::stoll(*current) : 0) + delta;
  set(key, std::to_string(value));
  return value;
}

Bytes FileStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  DirLock lock(directory_);
  auto current = tryGet(key);
  if (current ? *current != expected : !expected.empty()) return current.value_or("");
  set(key, desired);
  return desired;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::string missing;
    for (const auto& key : keys) {
      if (::access(pathOf(key).c_str(), F_OK) != 0) missing += " '" + key + "'";
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw CommError(ErrorKind::kTimeout, "store.wait", 0, -1, "keys still missing:" + missing);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool FileStore::remove(const std::string& key) { return ::unlink(pathOf(key).c_str()) == 0; }

int64_t FileStore::removePrefix(const std::string& prefix) {
  int64_t removed = 0;
  DIR* dir = ::opendir(directory_.c_str());
  if (dir == nullptr) return 0;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("k-", 0) != 0) continue;
    if (unescape(name.substr(2)).rfind(prefix, 0) == 0 && remove(unescape(name.substr(2)))) {
      ++removed;
    }
  }
  ::closedir(dir);
  return removed;
}

}  // namespace cumulus::comm::testing
