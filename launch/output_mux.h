#pragma once
// Copies each worker's captured output to the launcher's console with a rank prefix
// ("[rank1] …") and, unprefixed, to that rank's own log file. Partial lines are held until their
// newline (or 64 KiB), so lines of different ranks never interleave mid-line.
// Not thread-safe: driven by the launcher's single monitor loop.

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cumulus::launch {

class OutputMux {
 public:
  explicit OutputMux(FILE* console) : console_(console) {}
  ~OutputMux();

  // Starts following `fd` (not owned) for `rank`, appending to `log_path`; its console lines
  // start with "[<label>] " ("[rank<rank>] " when `label` is empty). Throws std::runtime_error if
  // the log file cannot be opened, naming it.
  void add(int rank, int fd, const std::string& log_path, std::string label = "");
  // Waits up to `timeout_ms` for output, then copies whatever is ready. Returns the ranks whose
  // pipe reached end of file during this call.
  std::vector<int> pump(int timeout_ms);
  // Copies what is left of `rank`'s output (flushing a final partial line) and forgets it.
  void finish(int rank);
  bool following(int rank) const { return streams_.count(rank) > 0; }
  // Remembers, per rank and marker, the last line that contains `marker` (a worker's
  // "preempted at step S, checkpoint PATH", its "error: " line), so the launcher can repeat it in
  // its own report. The indented lines right after it are part of it (an error that lists what
  // it is about below, as "differs in 2 keys:\n  a: 1 -> 2\n  b: 3 -> 4"): each is joined to it
  // without its indent, after a space where the text so far ends in ':', else after "; "
  // ("differs in 2 keys: a: 1 -> 2; b: 3 -> 4"), up to kMaxMarkedLine bytes in all.
  void watchFor(std::string marker) { markers_.push_back(std::move(marker)); }
  // "" when `rank` printed no line with `marker` (or `marker` is not watched).
  std::string lastMarkedLine(int rank, const std::string& marker) const {
    auto it = marked_.find({rank, marker});
    return it == marked_.end() ? "" : it->second;
  }

 private:
  static constexpr size_t kMaxMarkedLine = 4096;

  struct Stream {
    int fd = -1;
    FILE* log = nullptr;
    std::string pending;
    std::string label;
    std::vector<std::string> marked_last;  // the markers the stream's last line had
  };
  void emit(int rank, Stream& s, bool flush_partial);
  bool drain(int rank, Stream& s);  // returns false at EOF

  void line(int rank, Stream& s, const char* data, size_t size);

  FILE* console_;
  std::map<int, Stream> streams_;
  std::vector<std::string> markers_;
  std::map<std::pair<int, std::string>, std::string> marked_;
};

}  // namespace cumulus::launch
