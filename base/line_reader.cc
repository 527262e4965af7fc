#include "base/line_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace cumulus::base {
namespace {
constexpr size_t kChunk = size_t{1} << 16;
}

LineReader::LineReader(Fd fd, std::string path, size_t max_line)
    : fd_(std::move(fd)), path_(std::move(path)), max_line_(max_line) {}

bool LineReader::fill() {
  buffer_.erase(0, at_);
  at_ = 0;
  const size_t old = buffer_.size();
  buffer_.resize(old + kChunk);
  ssize_t n;
  do {
    n = ::read(fd_.get(), buffer_.data() + old, kChunk);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    buffer_.resize(old);
    throw std::runtime_error(path_ + ": cannot read: " + std::strerror(errno));
  }
  buffer_.resize(old + static_cast<size_t>(n));
  return n > 0;
}

bool LineReader::next(Line& line) {
  line.text.clear();
  line.cut = false;
  line.ended = true;
  bool any = false;
  for (;;) {
    const size_t nl = buffer_.find('\n', at_);
    const size_t end = nl == std::string::npos ? buffer_.size() : nl;
    // Keep what still fits in max_line; a longer line's rest is passed over, never held.
    const size_t room = max_line_ - line.text.size();
    const size_t take = std::min(room, end - at_);
    line.text.append(buffer_, at_, take);
    if (end - at_ > take) line.cut = true;
    any = any || end > at_ || nl != std::string::npos;
    at_ = end;
    if (nl != std::string::npos) {
      at_ = nl + 1;
      break;
    }
    if (!fill()) {
      if (!any) return false;
      line.ended = false;
      break;
    }
  }
  line.number = ++number_;
  return true;
}

}  // namespace cumulus::base
