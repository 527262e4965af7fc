#include "configs/parse.h"

#include <sys/stat.h>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "base/regular_file.h"
#include "base/suggest.h"
#include "configs/schema.h"
#include "configs/yaml_reader.h"

namespace cumulus::configs {
using base::closestSpelling;
using base::editDistance;
using base::orList;
namespace {

// ---------------------------------------------------------------------------------------------
// Where values come from: a file (positions are file:line:col) or one --set argument.
struct Input {
  std::string source;  // file name, or the whole "--set key=value"
  bool is_override = false;

  std::string at(const YamlNode& node) const {
    if (is_override) return source;
    return source + ":" + std::to_string(node.line) + ":" + std::to_string(node.column);
  }
};

[[noreturn]] void fail(const std::string& where, std::string_view path, const std::string& what) {
  std::string message = where + ": ";
  if (!path.empty()) message += std::string(path) + ": ";
  throw ConfigError(message + what);
}

// ---------------------------------------------------------------------------------------------
// Scalars to values. Numbers are parsed strictly and locale-free (from_chars).

// What a node is, for "got ...".
std::string describe(const YamlNode& node) {
  switch (node.kind) {
    case YamlNode::Kind::kNull:
      return "nothing";
    case YamlNode::Kind::kSequence:
      return "a list";
    case YamlNode::Kind::kMapping:
      return "a mapping";
    case YamlNode::Kind::kScalar:
      if (node.isNullish()) return node.text.empty() ? "nothing" : node.text;
      return (node.quoted ? "the string " : "") + quoteForMessage(node.text);
  }
  return "";
}

enum class Parsed { kOk, kNotANumber, kNotWhole, kOutOfRange };

std::string_view withoutPlus(const std::string& text) {
  std::string_view view = text;
  if (view.size() > 1 && view[0] == '+' && view[1] != '-') view.remove_prefix(1);
  return view;
}

Parsed parseDouble(const std::string& text, double& out) {
  std::string_view view = withoutPlus(text);
  if (view.empty()) return Parsed::kNotANumber;
  auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), out);
  if (end != view.data() + view.size()) return Parsed::kNotANumber;
  if (error == std::errc::result_out_of_range) return Parsed::kOutOfRange;
  if (error != std::errc()) return Parsed::kNotANumber;
  if (!std::isfinite(out)) return Parsed::kNotANumber;  // "inf", "nan"
  return Parsed::kOk;
}

Parsed parseInt(const std::string& text, int64_t& out) {
  std::string_view view = withoutPlus(text);
  auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), out);
  if (!view.empty() && end == view.data() + view.size()) {
    return error == std::errc() ? Parsed::kOk : Parsed::kOutOfRange;
  }
  // "1e6" and "4096.0" are whole numbers too.
  double value = 0;
  Parsed as_double = parseDouble(text, value);
  if (as_double != Parsed::kOk) return as_double;
  if (std::trunc(value) != value) return Parsed::kNotWhole;
  if (std::fabs(value) > 9007199254740992.0) return Parsed::kOutOfRange;  // 2^53: exact
  out = static_cast<int64_t>(value);
  return Parsed::kOk;
}

Parsed parseUInt(const std::string& text, uint64_t& out) {
  std::string_view view = withoutPlus(text);
  if (view.empty() || view[0] == '-') return Parsed::kNotANumber;
  auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), out);
  if (end != view.data() + view.size()) return Parsed::kNotANumber;
  return error == std::errc() ? Parsed::kOk : Parsed::kOutOfRange;
}

class Converter {
 public:
  Converter(const KeySpec& key, const Input& in) : key_(key), in_(in) {}

  Value convert(const YamlNode& node) {
    if (key_.type == ValueType::kIntList) return convertList(node);
    if (node.kind != YamlNode::Kind::kScalar || node.isNullish()) {
      std::string hint = key_.type == ValueType::kString && node.isNullish()
                             ? "; write \"\" for an empty string"
                             : "";
      wrongType(node, key_.path, expectedPhrase(key_), hint);
    }
    if (key_.type == ValueType::kString) return node.text;
    if (node.quoted) {
      wrongType(node, key_.path, expectedPhrase(key_), "; remove the quotes");
    }
    switch (key_.type) {
      case ValueType::kInt:
        return parseIntNode(node, key_.path, expectedPhrase(key_));
      case ValueType::kUInt: {
        uint64_t value = 0;
        check(parseUInt(node.text, value), node, key_.path, expectedPhrase(key_));
        return value;
      }
      case ValueType::kDouble: {
        double value = 0;
        check(parseDouble(node.text, value), node, key_.path, expectedPhrase(key_));
        return value;
      }
      case ValueType::kBool: {
        const std::string& t = node.text;
        if (t == "true" || t == "True" || t == "TRUE") return true;
        if (t == "false" || t == "False" || t == "FALSE") return false;
        wrongType(node, key_.path, expectedPhrase(key_), "");
      }
      default:
        break;
    }
    assert(false && "unhandled value type");
    return {};
  }

 private:
  Value convertList(const YamlNode& node) {
    if (node.kind != YamlNode::Kind::kSequence) {
      wrongType(node, key_.path, expectedPhrase(key_), ", e.g. " + formatValue(key_.default_value));
    }
    std::string element_phrase = "an integer";
    if (std::string bounds = boundsText(key_.bounds); !bounds.empty())
      element_phrase += " " + bounds;
    std::vector<int64_t> values;
    for (size_t i = 0; i < node.items.size(); ++i) {
      const YamlNode& item = node.items[i];
      std::string path = std::string(key_.path) + "[" + std::to_string(i) + "]";
      if (item.kind != YamlNode::Kind::kScalar || item.isNullish()) {
        wrongType(item, path, element_phrase, "");
      }
      if (item.quoted) wrongType(item, path, element_phrase, "; remove the quotes");
      values.push_back(std::get<int64_t>(parseIntNode(item, path, element_phrase)));
    }
    return values;
  }

  Value parseIntNode(const YamlNode& node, std::string_view path, const std::string& phrase) {
    int64_t value = 0;
    check(parseInt(node.text, value), node, path, phrase);
    return value;
  }

  void check(Parsed parsed, const YamlNode& node, std::string_view path,
             const std::string& phrase) {
    switch (parsed) {
      case Parsed::kOk:
        return;
      case Parsed::kNotANumber:
        wrongType(node, path, phrase, "");
      case Parsed::kNotWhole:
        fail(in_.at(node), path, "expected " + phrase + ", got " + clipForMessage(node.text));
      case Parsed::kOutOfRange:
        fail(in_.at(node), path,
             "expected " + phrase + ", got " + clipForMessage(node.text) +
                 ", which is out of range");
    }
  }

  [[noreturn]] void wrongType(const YamlNode& node, std::string_view path,
                              const std::string& phrase, const std::string& hint) {
    fail(in_.at(node), path, "expected " + phrase + ", got " + describe(node) + hint);
  }

  const KeySpec& key_;
  const Input& in_;
};

// ---------------------------------------------------------------------------------------------
// "did you mean" for a dotted path that names no key.

bool isSection(std::string_view name) {
  for (std::string_view section : sectionNames()) {
    if (section == name) return true;
  }
  return false;
}

std::vector<std::string> namesUnder(std::string_view parent) {
  std::vector<std::string> names;
  for (const KeySpec& key : schema()) {
    if (key.section() == parent) names.emplace_back(key.leaf());
  }
  if (parent.empty()) {
    for (std::string_view section : sectionNames()) names.emplace_back(section);
  }
  return names;
}

std::string joinPath(std::string_view parent, std::string_view leaf) {
  if (parent.empty()) return std::string(leaf);
  if (leaf.empty()) return std::string(parent);
  return std::string(parent) + (leaf[0] == '[' ? "" : ".") + std::string(leaf);
}

std::string unknownKeyMessage(std::string_view path) {
  size_t dot = path.rfind('.');
  std::string_view parent = dot == std::string_view::npos ? "" : path.substr(0, dot);
  std::string_view leaf = dot == std::string_view::npos ? path : path.substr(dot + 1);
  bool parent_known = parent.empty() || isSection(parent);
  std::vector<std::string> siblings =
      parent_known ? namesUnder(parent) : std::vector<std::string>{};
  auto didYouMean = [](const std::vector<std::string>& paths) {
    return "unknown key; did you mean " + orList(paths) + "?";
  };
  // 1. A one-letter slip at the same level.
  std::string sibling = closestSpelling(leaf, siblings);
  if (!sibling.empty() && editDistance(leaf, sibling) <= 1) {
    return didYouMean({joinPath(parent, sibling)});
  }
  // 2. The same name in another section: "trainer.lr" -> "optimizer.lr".
  std::vector<std::string> same_leaf;
  for (const KeySpec& key : schema()) {
    if (key.leaf() == leaf && key.path != path) same_leaf.emplace_back(key.path);
  }
  for (std::string_view section : sectionNames()) {
    if (section == leaf && !parent.empty()) same_leaf.emplace_back(section);
  }
  if (!same_leaf.empty()) return didYouMean(same_leaf);
  // 3. A bigger slip at the same level, or slips in the section name ("optimiser.lrr").
  if (!sibling.empty()) return didYouMean({joinPath(parent, sibling)});
  if (!parent_known) {
    std::vector<std::string> sections(sectionNames().begin(), sectionNames().end());
    std::string section = closestSpelling(parent, sections);
    std::string name = section.empty() ? "" : closestSpelling(leaf, namesUnder(section));
    if (!name.empty()) return didYouMean({joinPath(section, name)});
  }
  // 4. A slip in the name of a key in another section: "trainer.lrr" -> "optimizer.lr".
  std::vector<std::string> leaves;
  for (const KeySpec& key : schema()) leaves.emplace_back(key.leaf());
  if (std::string other = closestSpelling(leaf, leaves); !other.empty()) {
    std::vector<std::string> matches;
    for (const KeySpec& key : schema()) {
      if (key.leaf() == other) matches.emplace_back(key.path);
    }
    return didYouMean(matches);
  }
  if (!parent_known) return "unknown key; `cumulus-config reference` lists every key";
  std::string known;
  for (const std::string& name : siblings) known += (known.empty() ? "" : ", ") + name;
  return "unknown key; the keys " +
         (parent.empty() ? std::string("at the top level") : "of " + std::string(parent)) +
         " are " + known;
}

// Longer keys are rejected before any "did you mean" search (its cost grows with the length).
constexpr size_t kMaxKeyLength = 128;

// ---------------------------------------------------------------------------------------------
// Applies parsed documents and overrides to an Experiment, remembering where each key was set.
class ExperimentBuilder {
 public:
  // A whole file: the top level must be a mapping.
  void applyDocument(const YamlNode& root, const Input& in) {
    if (root.kind != YamlNode::Kind::kMapping) {
      fail(in.at(root), "",
           "expected a mapping of experiment keys (name, model, data, ...) at the top level, got " +
               describe(root));
    }
    top_ = in.at(root);
    applyMapping("", root, in);
  }

  // One "--set key=value".
  void applyOverride(const std::string& argument) {
    Input in{"--set " + argument, true};
    size_t eq = argument.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError(in.source + ": expected KEY=VALUE, e.g. --set optimizer.lr=0.05");
    }
    std::string path = argument.substr(0, eq);
    std::string text = argument.substr(eq + 1);
    const KeySpec* key = findKey(path);
    if (!key && !isSection(path)) fail(in.source, path, unknownKeyMessage(path));
    YamlNode value;
    if (key && key->type == ValueType::kString && text.empty()) {
      value.kind = YamlNode::Kind::kScalar;  // "--set checkpoint.dir=" means the empty string
      value.quoted = true;
    } else {
      try {
        if (std::optional<YamlNode> parsed = readYaml(text)) value = std::move(*parsed);
      } catch (const YamlError& e) {
        std::string where;
        if (e.line > 1) {
          where = " (line " + std::to_string(e.line) + ", column " + std::to_string(e.column) +
                  " of the value)";
        } else if (e.line == 1) {
          where = " (column " + std::to_string(e.column) + " of the value)";
        }
        fail(in.source, joinPath(path, e.path), e.what() + where);
      }
    }
    applyPath(path, YamlNode{}, value, in);
  }

  Experiment finish() {
    for (const KeySpec& key : schema()) {
      if (key.required && !origins_.count(std::string(key.path))) {
        fail(top_, key.path,
             "missing; every experiment needs one, e.g. `" + std::string(key.path) + ": " +
                 (key.path == "name" ? "fashion-mlp" : "...") + "` at the top level");
      }
    }
    crossCheck();
    return experiment_;
  }

 private:
  struct Origin {
    std::string where;
    int order;
  };

  void applyMapping(const std::string& parent, const YamlNode& map, const Input& in) {
    std::map<std::string, const YamlNode*> seen;
    for (size_t i = 0; i + 1 < map.items.size(); i += 2) {
      const YamlNode& key = map.items[i];
      const YamlNode& value = map.items[i + 1];
      if (key.kind != YamlNode::Kind::kScalar || key.isNullish()) {
        fail(in.at(key), parent, "keys must be names, got " + describe(key));
      }
      if (key.text.size() > kMaxKeyLength) {
        fail(in.at(key), parent,
             "a key of " + std::to_string(key.text.size()) +
                 " characters; experiment keys are short names (`cumulus-config reference`)");
      }
      std::string path = joinPath(parent, key.text);
      if (auto [it, fresh] = seen.emplace(key.text, &key); !fresh) {
        fail(in.at(key), path,
             "duplicate key (first at line " + std::to_string(it->second->line) + ", column " +
                 std::to_string(it->second->column) + "); keep one");
      }
      applyPath(path, key, value, in);
    }
  }

  void applyPath(const std::string& path, const YamlNode& key_node, const YamlNode& value,
                 const Input& in) {
    if (const KeySpec* key = findKey(path)) return applyLeaf(*key, key_node, value, in);
    if (!isSection(path)) fail(in.at(key_node), path, unknownKeyMessage(path));
    if (value.isNullish()) return;  // "optimizer:" with every key commented out
    if (value.kind != YamlNode::Kind::kMapping) {
      std::string keys;
      for (const std::string& name : namesUnder(path)) keys += (keys.empty() ? "" : ", ") + name;
      fail(in.at(value), path,
           "expected a mapping of " + path + " keys (" + keys + "), got " + describe(value));
    }
    applyMapping(path, value, in);
  }

  void applyLeaf(const KeySpec& key, const YamlNode& key_node, const YamlNode& value,
                 const Input& in) {
    std::string path(key.path);
    // Catches "optimizer.lr: 1" next to "optimizer: {lr: 2}" in the same file.
    if (!in.is_override) {
      auto [it, fresh] = set_in_file_.emplace(path, in.at(key_node));
      if (!fresh) fail(in.at(key_node), path, "set twice (first at " + it->second + "); keep one");
    }
    Value parsed = Converter(key, in).convert(value);
    if (std::string why = checkValue(key, parsed); !why.empty()) fail(in.at(value), path, why);
    key.set(experiment_, parsed);
    origins_[path] = Origin{in.at(value), ++order_};
  }

  // Of `paths`, the one set last (its origin is what the user most likely just changed); only
  // keys that were set count. Defaults are consistent, so at least one was set.
  std::string blame(std::initializer_list<std::string_view> paths) const {
    std::string best;
    int best_order = 0;
    for (std::string_view path : paths) {
      auto it = origins_.find(std::string(path));
      if (it != origins_.end() && it->second.order > best_order) {
        best = std::string(path);
        best_order = it->second.order;
      }
    }
    assert(!best.empty() && "schema defaults violate a cross-field check");
    return best;
  }

  [[noreturn]] void failAt(const std::string& path, const std::string& what) const {
    fail(origins_.at(path).where, path, what);
  }

  void crossCheck() const {
    const Experiment& e = experiment_;
    const TrainerConfig& t = e.trainer;
    if (t.global_batch_size % t.grad_accumulation != 0) {
      std::string batch = std::to_string(t.global_batch_size);
      std::string accumulation = std::to_string(t.grad_accumulation);
      if (blame({"trainer.global_batch_size", "trainer.grad_accumulation"}) ==
          "trainer.grad_accumulation") {
        failAt("trainer.grad_accumulation",
               accumulation + " does not divide trainer.global_batch_size (" + batch +
                   "); the micro-batches of a step must be equal, so pick a divisor of " + batch);
      }
      failAt("trainer.global_batch_size",
             batch + " is not a multiple of trainer.grad_accumulation (" + accumulation +
                 "); the micro-batches of a step must be equal");
    }
    if (e.comm.first_bucket_mb > e.comm.bucket_cap_mb) {
      std::string first = formatNumber(e.comm.first_bucket_mb),
                  cap = formatNumber(e.comm.bucket_cap_mb);
      if (blame({"comm.first_bucket_mb", "comm.bucket_cap_mb"}) == "comm.first_bucket_mb") {
        failAt("comm.first_bucket_mb",
               first + " is over comm.bucket_cap_mb (" + cap + "); make it at most that");
      }
      failAt("comm.bucket_cap_mb",
             cap + " is under comm.first_bucket_mb (" + first + "); make it at least that");
    }
    if (e.schedule.name == ScheduleName::kCosine && e.schedule.min_lr > e.optimizer.lr) {
      std::string floor = formatNumber(e.schedule.min_lr), lr = formatNumber(e.optimizer.lr);
      if (blame({"schedule.min_lr", "optimizer.lr"}) == "schedule.min_lr") {
        failAt("schedule.min_lr", floor + " is above optimizer.lr (" + lr +
                                      "); the cosine schedule decays from lr down to min_lr");
      }
      failAt("optimizer.lr", lr + " is below schedule.min_lr (" + floor +
                                 "); the cosine schedule decays from lr down to min_lr");
    }
    checkDiloco();
    checkDataFiles();
    if (e.data.format == DataFormat::kIdx && e.data.dataset == Dataset::kSynthetic && e.data.drop_last &&
        e.data.synthetic_train_samples < t.global_batch_size) {
      std::string samples = std::to_string(e.data.synthetic_train_samples);
      std::string batch = std::to_string(t.global_batch_size);
      if (blame({"data.synthetic_train_samples", "trainer.global_batch_size"}) ==
          "data.synthetic_train_samples") {
        failAt("data.synthetic_train_samples",
               samples + " is less than trainer.global_batch_size (" + batch +
                   "), so with data.drop_last no step would run");
      }
      failAt("trainer.global_batch_size", batch + " is more than data.synthetic_train_samples (" +
                                              samples +
                                              "), so with data.drop_last no step would run");
    }
  }

  // trainer.sync: diloco and the keys it needs consistent.
  void checkDiloco() const {
    const Experiment& e = experiment_;
    const DilocoConfig& d = e.diloco;
    if (d.nesterov && d.outer_momentum == 0) {
      if (blame({"diloco.nesterov", "diloco.outer_momentum"}) == "diloco.nesterov") {
        failAt("diloco.nesterov",
               "true needs diloco.outer_momentum above 0; set it, or nesterov: false");
      }
      failAt("diloco.outer_momentum",
             "0 leaves diloco.nesterov (true) no momentum; set nesterov: false");
    }
    if (d.fragments > d.inner_steps) {
      const std::string f = std::to_string(d.fragments), h = std::to_string(d.inner_steps);
      if (blame({"diloco.fragments", "diloco.inner_steps"}) == "diloco.fragments") {
        failAt("diloco.fragments",
               f + " is more than diloco.inner_steps (" + h +
                   "): each fragment syncs at a step of its own within a round, so use at most " +
                   h);
      }
      failAt("diloco.inner_steps",
             h + " is less than diloco.fragments (" + f +
                 "): each fragment syncs at a step of its own within a round, so use at least " +
                 f);
    }
    if (e.trainer.sync != SyncMode::kDiloco) return;
    if (e.comm.algorithm == Algorithm::kFunnel) {
      if (blame({"trainer.sync", "comm.algorithm"}) == "comm.algorithm") {
        failAt("comm.algorithm",
               "funnel cannot carry DiLoCo's outer syncs (trainer.sync: diloco): the "
               "parameter server holds one copy of the gradients; use ring, tree, "
               "hierarchical or auto");
      }
      failAt("trainer.sync",
             "diloco needs a peer-to-peer all-reduce, but comm.algorithm is funnel "
             "(a parameter server); set comm.algorithm to ring, tree, hierarchical or auto");
    }
    if (e.comm.compression != Compression::kNone) {
      if (blame({"trainer.sync", "comm.compression"}) == "comm.compression") {
        failAt("comm.compression",
               std::string(compressionName(e.comm.compression)) +
                   " compresses every step's gradients, which trainer.sync: diloco does not send; "
                   "compress the outer gradients with diloco.outer_compression instead");
      }
      failAt("trainer.sync", "diloco sends no per-step gradients for comm.compression (" +
                                 std::string(compressionName(e.comm.compression)) +
                                 ") to compress; use diloco.outer_compression instead");
    }
  }

  // npy and tokens read their samples from data.train and data.test: both must be named. Blamed
  // where the empty path was set, or else where data.format was (the default is "idx").
  void checkDataFiles() const {
    const DataConfig& d = experiment_.data;
    if (d.format == DataFormat::kIdx) return;
    const std::string what = d.format == DataFormat::kNpy ? "a directory with inputs.npy and targets.npy"
                                               : "a 1-D .npy file of token ids";
    for (const auto& [path, value] :
         {std::pair<std::string, const std::string*>{"data.train", &d.train},
          {"data.test", &d.test}}) {
      if (!value->empty()) continue;
      const auto set = origins_.find(path);
      fail(set != origins_.end() ? set->second.where : origins_.at("data.format").where, path,
           "required when data.format is " + std::string(base::nameOf(d.format)) + "; name " + what);
    }
  }

  Experiment experiment_;
  std::map<std::string, Origin> origins_;           // key path -> where it was last set
  std::map<std::string, std::string> set_in_file_;  // key path -> first position in the file
  std::string top_;                                 // the file's top-level mapping, for "missing"
  int order_ = 0;
};

}  // namespace

Experiment parseExperiment(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  std::optional<YamlNode> root;
  try {
    root = readYaml(yaml_text);
  } catch (const YamlError& e) {
    std::string where = e.line > 0
                            ? source + ":" + std::to_string(e.line) + ":" + std::to_string(e.column)
                            : source;
    fail(where, e.path, e.what());
  }
  if (!root) {
    fail(source + ":1:1", "",
         "the file has no settings; an experiment needs at least `name: <run name>`");
  }
  ExperimentBuilder builder;
  builder.applyDocument(*root, Input{source, false});
  for (const std::string& override_argument : overrides) builder.applyOverride(override_argument);
  return builder.finish();
}

Experiment loadExperiment(const std::string& path, const std::vector<std::string>& overrides) {
  const size_t limit = YamlLimits{}.max_bytes;
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw ConfigError(path + ": cannot read the experiment file: " + std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) {
    throw ConfigError(path + ": is a directory; name an experiment .yaml file");
  }
  if (S_ISREG(info.st_mode) && static_cast<uint64_t>(info.st_size) > limit) {
    throw ConfigError(path + ": " + sizeLimitMessage(static_cast<size_t>(info.st_size), limit));
  }
  // A FIFO would block open(2) until a writer came (and the trainer's SIGTERM handling with it),
  // a device could be read forever: only a regular file is read. At most one byte past the
  // limit: the file may have grown since the stat.
  std::string problem;
  const std::optional<std::string> text = base::readRegularFile(path, problem, limit + 1);
  if (!text) throw ConfigError(path + ": " + problem);
  if (text->size() > limit) throw ConfigError(path + ": " + sizeLimitMessage(0, limit));
  return parseExperiment(*text, path, overrides);
}

}  // namespace cumulus::configs
