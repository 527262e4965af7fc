#include "launch/output_mux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <stdexcept>
#include <string_view>

namespace cumulus::launch {
namespace {
constexpr size_t kMaxPartialLine = 64 * 1024;
}

OutputMux::~OutputMux() {
  while (!streams_.empty()) finish(streams_.begin()->first);
}

void OutputMux::add(int rank, int fd, const std::string& log_path, std::string label) {
  FILE* log = std::fopen(log_path.c_str(), "ae");
  if (!log) {
    throw std::runtime_error("cannot open log file " + log_path + ": " + strerror(errno));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  finish(rank);
  if (label.empty()) label = "rank" + std::to_string(rank);
  streams_[rank] = Stream{fd, log, {}, std::move(label), {}};
}

void OutputMux::line(int rank, Stream& s, const char* data, size_t size) {
  std::fprintf(console_, "[%s] %.*s\n", s.label.c_str(), static_cast<int>(size), data);
  const std::string_view text(data, size);
  const size_t indent = text.find_first_not_of(" \t");
  if (!s.marked_last.empty() && indent > 0 && indent != std::string_view::npos) {
    // A continuation of the marked line before it: the launcher's report repeats one line, and
    // without this it would end at "differs in 1 key:".
    for (const std::string& marker : s.marked_last) {
      std::string& marked = marked_[{rank, marker}];
      if (marked.size() >= kMaxMarkedLine) continue;
      marked += marked.back() == ':' ? " " : "; ";
      marked += text.substr(indent);
      if (marked.size() > kMaxMarkedLine) marked.resize(kMaxMarkedLine);
    }
    return;
  }
  s.marked_last.clear();
  for (const std::string& marker : markers_) {
    if (text.find(marker) == std::string_view::npos) continue;
    marked_[{rank, marker}] = std::string(text);
    s.marked_last.push_back(marker);
  }
}

void OutputMux::emit(int rank, Stream& s, bool flush_partial) {
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) break;
    line(rank, s, s.pending.data() + start, nl - start);
    start = nl + 1;
  }
  if ((flush_partial && start < s.pending.size()) || s.pending.size() - start > kMaxPartialLine) {
    line(rank, s, s.pending.data() + start, s.pending.size() - start);
    start = s.pending.size();
  }
  s.pending.erase(0, start);
  std::fflush(console_);
}

bool OutputMux::drain(int rank, Stream& s) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      std::fwrite(buf, 1, static_cast<size_t>(n), s.log);
      s.pending.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    std::fflush(s.log);
    emit(rank, s, false);
    return n < 0;  // EAGAIN: more later; 0: EOF
  }
}

std::vector<int> OutputMux::pump(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (auto& [rank, s] : streams_) {
    if (s.fd < 0) continue;
    fds.push_back(pollfd{s.fd, POLLIN, 0});
    ranks.push_back(rank);
  }
  std::vector<int> closed;
  if (fds.empty()) {
    if (timeout_ms > 0) ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    return closed;
  }
  int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready <= 0) return closed;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Stream& s = streams_[ranks[i]];
    if (!drain(ranks[i], s)) {
      s.fd = -1;
      closed.push_back(ranks[i]);
    }
  }
  return closed;
}

void OutputMux::finish(int rank) {
  auto it = streams_.find(rank);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  if (s.fd >= 0) drain(rank, s);
  emit(rank, s, true);
  if (s.log) std::fclose(s.log);
  streams_.erase(it);
}

}  // namespace cumulus::launch
