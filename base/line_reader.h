#pragma once
// LineReader: the lines of a file, one at a time, in memory bounded by the longest line kept
// (`max_line`) and not by the file: for records files (metrics.jsonl) that a long run makes
// hundreds of megabytes long. A line longer than `max_line` comes back cut, flagged, and the rest
// of it is skipped unread into memory. Blocks in read(2) on its descriptor; open the file with
// openRegularFile (base/regular_file.h) so that it is not a FIFO. Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/fd.h"

namespace cumulus::base {

struct Line {
  std::string text;    // without its '\n'; at most max_line bytes
  int64_t number = 0;  // 1 for the first line
  bool cut = false;    // the line was longer than max_line; text holds its start
  bool ended = true;   // false for a last line without '\n' (a writer killed mid-line)
};

class LineReader {
 public:
  static constexpr size_t kDefaultMaxLine = size_t{1} << 20;

  // Reads `fd` from its current offset; `path` names it in errors.
  LineReader(Fd fd, std::string path, size_t max_line = kDefaultMaxLine);

  // The next line into `line`; false at the end of the file. Throws std::runtime_error
  // "<path>: cannot read: <errno text>" on a read error.
  bool next(Line& line);

 private:
  // Refills buffer_ from the descriptor; false at the end of the file.
  bool fill();

  Fd fd_;
  std::string path_;
  size_t max_line_;
  std::string buffer_;
  size_t at_ = 0;  // the first byte of buffer_ not handed out yet
  int64_t number_ = 0;
};

}  // namespace cumulus::base
