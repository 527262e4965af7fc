#pragma once
// A bounded YAML reader: turns untrusted text into a small tree, or fails fast.
//
// yaml-cpp recurses once per nesting level (0.7 only stops at depth 500, which already overflows
// a 64 KiB thread stack), and its node graph shares aliased nodes, so that walking a "billion
// laughs" document visits 10^9 nodes. This reader therefore:
//   1. rejects text over `max_bytes` and text holding a NUL byte, without parsing;
//   2. pre-scans the raw text for flow and block nesting (estimateNestingDepth) and rejects
//      anything deeper than `max_depth` before yaml-cpp sees it: 16,384 '[' cost one pass over
//      the first 32 of them;
//   3. drives yaml-cpp's event parser (no YAML::Node) and enforces, event by event, the exact
//      limits: at most `max_depth` open collections, `max_nodes` nodes, one document, and no
//      anchor, alias or tag, each rejected at its first occurrence.
// Step 3 alone bounds yaml-cpp's recursion, because yaml-cpp announces each collection before it
// descends into it. It does not bound yaml-cpp's memory: while a '[' or '{' might still turn out
// to be a simple key, yaml-cpp's scanner queues a token for every bracket after it without
// announcing anything, about 240 bytes per input byte. Measured with `cumulus-config check` on
// 1,048,000 '[': 250 MB peak and 0.54 s without the pre-scan, 6.5 MB and 0.01 s with it. So the
// pre-scan stays: a heuristic (it can be fooled, and a test shows one such input, which then
// costs the same 250 MB) that rejects the common hostile shapes before yaml-cpp buffers them.
// Memory is O(max_bytes) and the stack O(max_depth) whatever the input. Time is linear in the
// size: at most a few hundred ms for 1 MiB, yaml-cpp's own scanning speed.
//
// Thread-safe: no shared state.

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cumulus::configs {

struct YamlLimits {
  size_t max_bytes = size_t{1} << 20;  // 1 MiB
  int max_depth = 64;                  // experiment files nest 3 levels
  size_t max_nodes = 10000;            // experiment files have about 120
};

struct YamlNode {
  enum class Kind { kNull, kScalar, kSequence, kMapping };
  Kind kind = Kind::kNull;
  int line = 1;  // 1-based position of the node's first character
  int column = 1;
  std::string text;             // kScalar: the value, quotes and escapes resolved
  bool quoted = false;          // kScalar: written quoted or as a block scalar (| or >)
  std::vector<YamlNode> items;  // kSequence: the items; kMapping: key, value, key, value, ...

  bool isNullish() const;  // kNull, or a plain scalar "", "~", "null", "Null" or "NULL"
};

// Why reading failed. `path` is the key path inside the document where it is known ("a.b[2]"),
// else empty; `what` says what is wrong and what to do. Callers format it with their source name.
class YamlError : public std::runtime_error {
 public:
  YamlError(int line, int column, std::string path, const std::string& what)
      : std::runtime_error(what), line(line), column(column), path(std::move(path)) {}
  int line;    // 1-based; 0 when the error has no position (size limit)
  int column;  // 1-based
  std::string path;
};

// "<size> bytes is over the 1 MiB limit (1048576 bytes) for experiment files; ...": the one
// wording for text and files that are too big. `size` 0 means "more than the limit".
std::string sizeLimitMessage(size_t size, size_t limit);

// Reads one YAML document. Returns nullopt for a document with no content (empty, blank, only
// comments). Throws YamlError for malformed YAML, a second document, or any limit above.
std::optional<YamlNode> readYaml(std::string_view text, const YamlLimits& limits = {});

// The deepest nesting the pre-scan sees: block indentation levels (a "- " or "? " opens one of
// its own) plus two per open flow bracket (see kLevelsPerBracket). Over-estimates rather than
// under-estimates: a test checks it against yaml-cpp's own event nesting on random documents. Stops
// early, returning the depth reached and where, as soon as the depth exceeds `stop_above`.
struct NestingScan {
  int depth = 0;
  int line = 1;  // where `depth` was first reached
  int column = 1;
};
NestingScan estimateNestingDepth(std::string_view text, int stop_above = 1 << 30);

}  // namespace cumulus::configs
