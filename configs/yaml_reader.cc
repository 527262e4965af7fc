#include "configs/yaml_reader.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cassert>
#include <sstream>

namespace cumulus::configs {

bool YamlNode::isNullish() const {
  if (kind == Kind::kNull) return true;
  if (kind != Kind::kScalar || quoted) return false;
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

// ---------------------------------------------------------------------------------------------
// Pre-scan. It mirrors just enough of YAML's lexical rules to know where a '[', '{', quote or
// block scalar can begin, so that brackets inside quoted strings, comments and block scalars are
// not counted, while every bracket yaml-cpp would nest on is. Where the rules are ambiguous it
// counts (an over-estimate only rejects absurd files; an under-estimate would let a stack
// overflow through).
namespace {

bool isBlank(char c) { return c == ' ' || c == '\t'; }

// Splits on "\n", "\r\n" and "\r", the three line breaks yaml-cpp knows.
class LineSplitter {
 public:
  explicit LineSplitter(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (pos_ > text_.size()) return false;
    size_t end = pos_;  // a plain loop: find_first_of tries each of its characters per byte
    while (end < text_.size() && text_[end] != '\n' && text_[end] != '\r') ++end;
    line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    if (end + 1 < text_.size() && text_[end] == '\r' && text_[end + 1] == '\n') ++pos_;
    return true;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

class NestingScanner {
 public:
  explicit NestingScanner(int stop_above) : stop_above_(stop_above) {}

  NestingScan run(std::string_view text) {
    LineSplitter lines(text);
    std::string_view line;
    while (lines.next(line)) {
      ++line_no_;
      if (!scanLine(line)) break;
    }
    return best_;
  }

 private:
  enum class Quote { kNone, kSingle, kDouble };

  // Records the current depth; false once it passes stop_above_.
  bool record(size_t column) {
    int depth = static_cast<int>(indents_.size()) + kLevelsPerBracket * flow_;
    if (depth > best_.depth) best_ = {depth, line_no_, static_cast<int>(column) + 1};
    return depth <= stop_above_;
  }

  // Block levels are keyed 2*column for a node starting at `column` and 2*column+1 for an entry
  // indicator ("- ", "? ", ": ") there, so that a sequence written at its parent key's indent
  // ("key:\n- a") still counts as a level of its own.
  static int nodeLevel(size_t column) { return 2 * static_cast<int>(column); }
  static int entryLevel(size_t column) { return 2 * static_cast<int>(column) + 1; }
  static bool isEntryIndicator(std::string_view line, size_t i) {
    return i < line.size() && (line[i] == '-' || line[i] == '?' || line[i] == ':') &&
           (i + 1 == line.size() || isBlank(line[i + 1]));
  }

  bool pushLevel(int level, size_t column) {
    if (!indents_.empty() && indents_.back() >= level) return true;
    indents_.push_back(level);
    return record(column);
  }

  // Returns false to stop scanning.
  bool scanLine(std::string_view line) {
    size_t indent = 0;
    while (indent < line.size() && line[indent] == ' ') ++indent;
    bool blank = indent == line.size();
    if (block_scalar_parent_ != kNoBlockScalar) {
      if (blank || static_cast<int>(indent) > block_scalar_parent_) return true;
      block_scalar_parent_ = kNoBlockScalar;
    }
    size_t i = 0;
    bool node_start = true;  // the next non-blank character may begin a node
    if (quote_ == Quote::kNone && flow_ == 0) {
      if (blank || line[indent] == '#') return true;
      if (indent == 0 && line.size() >= 3 &&
          (line.substr(0, 3) == "---" || line.substr(0, 3) == "...") &&
          (line.size() == 3 || isBlank(line[3]))) {
        indents_.clear();
        i = 3;
      } else {
        int base = isEntryIndicator(line, indent) ? entryLevel(indent) : nodeLevel(indent);
        while (!indents_.empty() && indents_.back() > base) indents_.pop_back();
        if (!pushLevel(nodeLevel(indent), indent)) return false;
        i = indent;
        // "- ", "? " and ": " at the start of a line each open a level on the same line, and so
        // does the node after the last of them.
        while (isEntryIndicator(line, i)) {
          if (!pushLevel(entryLevel(i), i)) return false;
          ++i;
          while (i < line.size() && isBlank(line[i])) ++i;
        }
        if (i > indent && i < line.size() && line[i] != '#' && !pushLevel(nodeLevel(i), i)) {
          return false;
        }
      }
    } else if (quote_ != Quote::kNone) {
      node_start = false;
    }
    return scanRest(line, i, node_start);
  }

  // Inside a quoted scalar: consumes line[i] (and the escaped or doubled quote after it), and
  // closes the scalar at its closing quote.
  void scanQuoted(std::string_view line, size_t& i, bool& after_json_node) {
    const char c = line[i];
    if (quote_ == Quote::kDouble) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        quote_ = Quote::kNone;
        after_json_node = true;
      }
      return;
    }
    if (c == '\'') {
      if (i + 1 < line.size() && line[i + 1] == '\'') {
        ++i;
      } else {
        quote_ = Quote::kNone;
        after_json_node = true;
      }
    }
  }

  // One non-blank character `c` at column `i` inside brackets; `separator`: it is a ',' or a ':'
  // that ends a key. Returns false when an opening bracket passes the depth limit.
  bool scanFlow(char c, size_t i, bool separator, bool& node_start, bool& after_json_node) {
    if (c == '[' || c == '{') {
      ++flow_;
      if (!record(i)) return false;
      node_start = true;
    } else if (c == ']' || c == '}') {
      --flow_;
      node_start = false;
      after_json_node = true;
    } else if (c == ',' || separator) {
      node_start = true;
    } else if (c == '?' && node_start) {
      node_start = true;
    } else {
      node_start = false;
    }
    return true;
  }

  bool scanRest(std::string_view line, size_t i, bool node_start) {
    bool after_json_node = false;  // just closed a quoted scalar or bracket: ':' may follow at once
    for (; i < line.size(); ++i) {
      if (quote_ != Quote::kNone) {
        scanQuoted(line, i, after_json_node);
        continue;
      }
      char c = line[i];
      if (isBlank(c)) continue;
      if (c == '#' && (i == 0 || isBlank(line[i - 1]))) return true;  // comment
      bool was_json_node = after_json_node;
      after_json_node = false;
      if (node_start && (c == '&' || c == '!' || c == '*')) {
        // Anchor, tag or alias: its token is skipped and a node may still follow it.
        while (i + 1 < line.size() && !isBlank(line[i + 1]) &&
               std::string_view(",[]{}").find(line[i + 1]) == std::string_view::npos) {
          ++i;
        }
        continue;
      }
      if (node_start && c == '"') {
        quote_ = Quote::kDouble;
        node_start = false;
        continue;
      }
      if (node_start && c == '\'') {
        quote_ = Quote::kSingle;
        node_start = false;
        continue;
      }
      bool colon_indicator = c == ':' && (i + 1 == line.size() || isBlank(line[i + 1]));
      if (flow_ > 0) {
        if (!scanFlow(c, i, colon_indicator || (c == ':' && was_json_node), node_start,
                      after_json_node)) {
          return false;
        }
        continue;
      }
      // Block context.
      if (node_start && (c == '[' || c == '{')) {
        ++flow_;
        if (!record(i)) return false;
        node_start = true;
        continue;
      }
      if (node_start && (c == '-' || c == '?') && (i + 1 == line.size() || isBlank(line[i + 1]))) {
        if (!pushLevel(entryLevel(i), i)) return false;  // an entry on the same line: "--- - a"
        continue;
      }
      if (node_start && (c == '|' || c == '>')) {
        block_scalar_parent_ = indents_.empty() ? -1 : indents_.back() / 2;  // its column
        return true;
      }
      node_start = colon_indicator || (c == ':' && was_json_node);
    }
    return true;
  }

  // Each open bracket counts two levels: its collection, and the one-pair mapping that yaml-cpp
  // opens around an entry ("[a: b]") or a key ("[[x]: b]") inside it, which the scan cannot
  // always see coming (the ':' may follow the key's closing bracket).
  static constexpr int kLevelsPerBracket = 2;

  static constexpr int kNoBlockScalar = -2;
  const int stop_above_;
  NestingScan best_;
  int line_no_ = 0;
  std::vector<int> indents_;  // block levels open (see nodeLevel), increasing
  int flow_ = 0;              // open flow brackets
  Quote quote_ = Quote::kNone;
  int block_scalar_parent_ = kNoBlockScalar;  // skipping lines indented more than this
};

}  // namespace

NestingScan estimateNestingDepth(std::string_view text, int stop_above) {
  return NestingScanner(stop_above).run(text);
}

// ---------------------------------------------------------------------------------------------
// Event handler that builds YamlNode trees and enforces the limits as events arrive, so that the
// first anchor, alias, tag or node past the cap stops yaml-cpp at once.
namespace {

class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(std::string_view text, const YamlLimits& limits) : text_(text), limits_(limits) {}

  std::optional<YamlNode> takeRoot() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (documents_++ == 0) return;
    // yaml-cpp also "starts a document" at a stray ',' (an empty document that consumes
    // nothing, forever: YAML::LoadAll(", a") runs out of memory). Only a marker line makes a
    // real second document.
    size_t pos = std::min<size_t>(static_cast<size_t>(std::max(mark.pos, 0)), text_.size());
    std::string_view upto = text_.substr(0, pos + 3);  // a marker may start right at `mark`
    bool marker = upto.find("\n---") != std::string_view::npos ||
                  upto.find("\n...") != std::string_view::npos || upto.substr(0, 3) == "---";
    if (!marker && pos < text_.size()) {
      fail(mark, "", std::string("invalid YAML: unexpected '") + text_[pos] + "'");
    }
    fail(mark, "", "a second YAML document starts here; an experiment file holds one document");
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    YamlNode node = start(mark, "?", anchor);
    node.kind = YamlNode::Kind::kNull;
    add(std::move(node));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    fail(mark, pathHere(), kNoAnchors);
  }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override {
    fail(mark, pathHere(), kNoAnchors);
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    YamlNode node = start(mark, tag, anchor);
    node.kind = YamlNode::Kind::kScalar;
    node.text = value;
    node.quoted = tag == "!";  // yaml-cpp's non-specific tag for quoted and block scalars
    add(std::move(node));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, YamlNode::Kind::kSequence);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, YamlNode::Kind::kMapping);
  }
  void OnMapEnd() override { close(); }

 private:
  static constexpr const char* kNoAnchors =
      "YAML anchors (&name) and aliases (*name) are not allowed in experiment files; write the "
      "value out in full";

  [[noreturn]] void fail(const YAML::Mark& mark, std::string path, const std::string& what) {
    throw YamlError(mark.line + 1, mark.column + 1, std::move(path), what);
  }

  YamlNode start(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) fail(mark, pathHere(), kNoAnchors);
    if (!tag.empty() && tag != "?" && tag != "!") {
      fail(mark, pathHere(),
           "YAML tags (" + tag +
               ") are not allowed in experiment files; remove the tag (quote the "
               "value if it must be a string)");
    }
    if (++nodes_ > limits_.max_nodes) {
      fail(mark, pathHere(),
           "more than " + std::to_string(limits_.max_nodes) +
               " YAML nodes; an experiment file has about a hundred. Is this the right file?");
    }
    YamlNode node;
    node.line = mark.line + 1;
    node.column = mark.column + 1;
    return node;
  }

  void open(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
            YamlNode::Kind kind) {
    YamlNode node = start(mark, tag, anchor);
    node.kind = kind;
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      fail(mark, pathHere(),
           "nesting deeper than " + std::to_string(limits_.max_depth) +
               " levels; experiment files nest 3 levels");
    }
    stack_.push_back(std::move(node));
  }

  void close() {
    assert(!stack_.empty());
    YamlNode node = std::move(stack_.back());
    stack_.pop_back();
    add(std::move(node));
  }

  void add(YamlNode node) {
    if (stack_.empty()) {
      root_ = std::move(node);
    } else {
      stack_.back().items.push_back(std::move(node));
    }
  }

  // The key path of the node about to be added, for messages: "model.hidden[2]".
  // Long paths (deep nesting, long keys) are cut: they are for reading, not for machines.
  std::string pathHere() const {
    constexpr size_t kMaxParts = 6, kMaxKey = 64;
    std::string path;
    size_t parts = 0;
    for (const YamlNode& open : stack_) {
      if (++parts > kMaxParts) return path + "...";
      size_t n = open.items.size();
      if (open.kind == YamlNode::Kind::kSequence) {
        path += "[" + std::to_string(n) + "]";
      } else if (n % 2 == 1) {  // a value follows its key
        const YamlNode& key = open.items[n - 1];
        if (!path.empty()) path += ".";
        path += key.kind != YamlNode::Kind::kScalar ? "?"
                : key.text.size() > kMaxKey         ? key.text.substr(0, kMaxKey) + "..."
                                                    : key.text;
      } else {
        break;  // a key is being read: the path so far names its mapping
      }
    }
    return path;
  }

  std::string_view text_;
  const YamlLimits& limits_;
  std::vector<YamlNode> stack_;  // collections being built, outermost first
  std::optional<YamlNode> root_;
  size_t nodes_ = 0;
  int documents_ = 0;
};

}  // namespace

std::string sizeLimitMessage(size_t size, size_t limit) {
  std::string pretty = limit % (1 << 20) == 0   ? std::to_string(limit >> 20) + " MiB"
                       : limit % (1 << 10) == 0 ? std::to_string(limit >> 10) + " KiB"
                                                : std::to_string(limit) + " bytes";
  std::string what = size > 0 ? std::to_string(size) + " bytes is" : "the file is";
  return what + " over the " + pretty + " limit (" + std::to_string(limit) +
         " bytes) for experiment files; is this the right file?";
}

namespace {

// yaml-cpp reports a tab in the indentation as "illegal map value" or the like, which never says
// "tab". Names the line (the error's own, else the nearest one above it) whose indentation has a
// tab, or returns "" when none does.
std::string tabIndentationHint(std::string_view text, int error_line) {
  int tab_line = 0;
  int line = 1;
  bool in_indent = true;
  for (size_t i = 0; i < text.size() && line <= error_line; ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      in_indent = true;
    } else if (in_indent && c == '\t') {
      tab_line = line;
    } else if (c != ' ') {
      in_indent = false;
    }
  }
  if (tab_line == 0) return "";
  return " (line " + std::to_string(tab_line) +
         " is indented with a tab; YAML indents with spaces only)";
}

}  // namespace

std::optional<YamlNode> readYaml(std::string_view text, const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    throw YamlError(0, 0, "", sizeLimitMessage(text.size(), limits.max_bytes));
  }
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    size_t line_start = text.rfind('\n', nul);
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + nul, '\n'));
    int column =
        static_cast<int>(nul - (line_start == std::string_view::npos ? 0 : line_start + 1)) + 1;
    throw YamlError(line, column, "",
                    "holds a NUL byte; experiment files are UTF-8 text (is this a binary or "
                    "UTF-16 file?)");
  }
  NestingScan nesting = estimateNestingDepth(text, limits.max_depth);
  if (nesting.depth > limits.max_depth) {
    throw YamlError(nesting.line, nesting.column, "",
                    "nesting deeper than " + std::to_string(limits.max_depth) +
                        " levels; experiment files nest 3 levels");
  }
  // yaml-cpp reads from a stream; the copy is bounded by max_bytes.
  std::istringstream stream{std::string(text)};
  TreeBuilder builder(text, limits);
  try {
    YAML::Parser parser(stream);
    if (!parser.HandleNextDocument(builder)) return std::nullopt;
    // A second document is rejected by OnDocumentStart before any of its nodes are parsed.
    parser.HandleNextDocument(builder);
  } catch (const YAML::ParserException& e) {
    throw YamlError(
        e.mark.line + 1, e.mark.column + 1, "",
        "invalid YAML: " + e.msg +
            (e.msg.find("tab") == std::string::npos ? tabIndentationHint(text, e.mark.line + 1)
                                                    : ""));
  } catch (const YAML::Exception& e) {
    throw YamlError(e.mark.line + 1, e.mark.column + 1, "", "invalid YAML: " + e.msg);
  }
  std::optional<YamlNode> root = builder.takeRoot();
  if (root && root->kind == YamlNode::Kind::kNull) return std::nullopt;
  return root;
}

}  // namespace cumulus::configs
