#pragma once
// The schema table: one row per experiment key, the only place where a key's type, default,
// allowed values and meaning are written. The parser, the validation, toYaml, diffKeys and the
// reference table in docs/configuration.md all walk this table; the struct initializers in configs/experiment.h
// repeat the defaults only because C++ needs them there, and a test checks that the two agree.
//
// Everything here is immutable after first use and safe to read from any thread.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "configs/experiment.h"

namespace cumulus::configs {

// The value types a key can have. The order matches the alternatives of `Value`.
enum class ValueType { kString, kInt, kUInt, kDouble, kBool, kIntList };
using Value = std::variant<std::string, int64_t, uint64_t, double, bool, std::vector<int64_t>>;

// A closed or open interval for numbers (and for each element of an integer list).
struct Bounds {
  double min = -std::numeric_limits<double>::infinity();
  bool min_open = false;
  double max = std::numeric_limits<double>::infinity();
  bool max_open = false;
};

// A format check for string values that choices cannot express. Returns "" when `text` is fine,
// otherwise what is wrong with it, phrased to follow "<key>: ".
using FormatCheck = std::string (*)(const std::string& text);

struct KeySpec {
  std::string_view path;  // dotted, e.g. "optimizer.lr"; top-level keys have no dot
  ValueType type;
  Value default_value;
  bool required = false;                  // must appear in the file or in an override
  Bounds bounds;                          // numbers and list elements
  std::vector<std::string_view> choices;  // strings: allowed values (empty: any string)
  std::string_view choice_prefix;         // strings: also allowed, "<prefix><non-empty rest>"
  FormatCheck format = nullptr;           // strings: extra check
  std::string_view format_text;           // strings: what `format` accepts, for messages/docs
  std::string_view meaning;               // one line, for the reference table

  Value (*get)(const Experiment&) = nullptr;
  void (*set)(Experiment&, const Value&) = nullptr;

  std::string_view section() const;  // "optimizer" for "optimizer.lr"; "" for top level
  std::string_view leaf() const;     // "lr" for "optimizer.lr"
};

// Every key in table order: top-level scalars first, then each section in `sectionNames()` order.
// This order is the order of toYaml, diffKeys and the reference table.
const std::vector<KeySpec>& schema();

// The sections (top-level mappings) in table order, and a one-line meaning for each.
const std::vector<std::string_view>& sectionNames();
std::string_view sectionMeaning(std::string_view section);

// The row for a dotted path, or nullptr.
const KeySpec* findKey(std::string_view path);

// An Experiment whose every key holds the table's default.
Experiment schemaDefaults();

// "a number > 0", "an integer >= 1", "one of sgd, adamw", "true or false", ...: the noun phrase
// used in "expected <phrase>, got ..." and, without the article, in the reference's type column.
std::string expectedPhrase(const KeySpec& key);

// The allowed values as a short phrase for the reference ("> 0", "sgd, adamw", "in [0, 1)"), or
// "" when any value of the type is allowed.
std::string allowedText(const KeySpec& key);

// "> 0", ">= 1", "in [0, 1)"; "" for unbounded.
std::string boundsText(const Bounds& bounds);

// The type name for the reference: "string", "integer", "number", "bool", "list of integers".
std::string_view typeName(ValueType type);

// Whether `value` is allowed for `key` (bounds, choices, format). Returns "" when it is,
// otherwise the complete message tail after "<key.path>: " (e.g. "expected a number > 0, got -1").
std::string checkValue(const KeySpec& key, const Value& value);

// `value` as YAML flow text that parseExperiment reads back to the same value: strings are quoted
// when a YAML reader could take them for something else, doubles keep a '.', lists are [a, b].
std::string formatValue(const Value& value);

// A number as people write it in messages and docs: "0.5", "25", "1.0e-08" (formatValue without
// a trailing ".0").
std::string formatNumber(double value);

// For error messages: `text` cut to its first 60 characters (then "..."), and the same quoted
// and escaped ("\"fast\"").
std::string clipForMessage(const std::string& text);
std::string quoteForMessage(const std::string& text);

}  // namespace cumulus::configs
