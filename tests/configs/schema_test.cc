// The schema table against the structs: the two cannot drift apart.
#include <gtest/gtest.h>

#include <set>

#include "configs/digest.h"
#include "configs/schema.h"
#include "tests/configs/test_util.h"

namespace cumulus::configs {
namespace {

// Counts the fields of an aggregate: the most initializers T{...} accepts, each an AnyField that
// converts to whatever the field is (the trick Boost.PFR uses).
struct AnyField {
  template <class T>
  operator T() const;  // never defined: only used in unevaluated contexts
};

template <class T, class... Args>
constexpr auto braceConstructible(int) -> decltype(T{std::declval<Args>()...}, true) {
  return true;
}
template <class T, class... Args>
constexpr bool braceConstructible(...) {
  return false;
}
template <class T, class... Fields>
constexpr size_t countFields() {
  if constexpr (braceConstructible<T, Fields..., AnyField>(0)) {
    return countFields<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

size_t keysIn(std::string_view section) {
  size_t n = 0;
  for (const KeySpec& key : schema()) n += key.section() == section;
  return n;
}

TEST(SchemaTest, EveryStructFieldHasExactlyOneRow) {
  EXPECT_EQ(countFields<ModelConfig>(), keysIn("model"));
  EXPECT_EQ(countFields<DataConfig>(), keysIn("data"));
  EXPECT_EQ(countFields<LossConfig>(), keysIn("loss"));
  EXPECT_EQ(countFields<OptimizerConfig>(), keysIn("optimizer"));
  EXPECT_EQ(countFields<ScheduleConfig>(), keysIn("schedule"));
  EXPECT_EQ(countFields<TrainerConfig>(), keysIn("trainer"));
  EXPECT_EQ(countFields<EvalConfig>(), keysIn("eval"));
  EXPECT_EQ(countFields<CheckpointConfig>(), keysIn("checkpoint"));
  EXPECT_EQ(countFields<CommConfig>(), keysIn("comm"));
  EXPECT_EQ(countFields<LaunchConfig>(), keysIn("launch"));
  EXPECT_EQ(countFields<Experiment>(), keysIn("") + sectionNames().size());
  // Paths are unique and every section has rows.
  std::set<std::string_view> paths;
  for (const KeySpec& key : schema()) EXPECT_TRUE(paths.insert(key.path).second) << key.path;
  for (std::string_view section : sectionNames()) {
    EXPECT_GT(keysIn(section), 0u) << section;
    EXPECT_FALSE(sectionMeaning(section).empty()) << section;
  }
}

TEST(SchemaTest, StructInitializersEqualTableDefaults) {
  Experiment from_structs;
  Experiment from_table = schemaDefaults();
  EXPECT_EQ(from_structs, from_table)
      << "differing keys: " << ::testing::PrintToString(diffKeys(from_structs, from_table));
  for (const KeySpec& key : schema()) {
    EXPECT_EQ(key.get(from_structs), key.default_value) << key.path;
  }
}

TEST(SchemaTest, DefaultsPassValidation) {
  for (const KeySpec& key : schema()) {
    EXPECT_EQ(checkValue(key, key.default_value), "") << key.path;
  }
}

// A valid value of `key` other than its default.
Value otherValue(const KeySpec& key) {
  std::vector<Value> candidates;
  switch (key.type) {
    case ValueType::kString:
      for (std::string_view c : key.choices) candidates.emplace_back(std::string(c));
      for (const char* c : {"other-run", "2:4", "node0:29400", "some dir/with: odd \"chars\""}) {
        candidates.emplace_back(std::string(c));
      }
      break;
    case ValueType::kInt:
      for (int64_t v : {int64_t{2}, int64_t{7}, int64_t{4096}}) candidates.emplace_back(v);
      break;
    case ValueType::kUInt:
      candidates.emplace_back(uint64_t{18446744073709551615ull});
      break;
    case ValueType::kDouble:
      for (double v : {0.25, 0.5, 2.5, 1e-7}) candidates.emplace_back(v);
      break;
    case ValueType::kBool:
      candidates.emplace_back(!std::get<bool>(key.default_value));
      break;
    case ValueType::kIntList:
      candidates.emplace_back(std::vector<int64_t>{64, 32});
      break;
  }
  for (const Value& v : candidates) {
    if (v != key.default_value && checkValue(key, v).empty()) return v;
  }
  ADD_FAILURE() << "no other valid value for " << key.path;
  return key.default_value;
}

TEST(SchemaTest, EachRowReadsAndWritesItsOwnField) {
  const Experiment defaults;
  for (const KeySpec& key : schema()) {
    Experiment changed = defaults;
    Value other = otherValue(key);
    key.set(changed, other);
    EXPECT_EQ(key.get(changed), other) << key.path;
    // operator== sees the field, and no other row reads it.
    EXPECT_NE(changed, defaults) << key.path << " is not compared by operator==";
    EXPECT_EQ(diffKeys(defaults, changed), std::vector<std::string>{std::string(key.path)});
  }
}

TEST(SchemaTest, ValuesFormatAsYamlThatReadsBack) {
  EXPECT_EQ(formatValue(0.1), "0.1");
  EXPECT_EQ(formatValue(25.0), "25.0");
  EXPECT_EQ(formatValue(1e-8), "1.0e-08");
  EXPECT_EQ(formatValue(1.5e300), "1.5e+300");
  EXPECT_EQ(formatValue(int64_t{-3}), "-3");
  EXPECT_EQ(formatValue(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(formatValue(std::string("runs/a-b_c.d")), "runs/a-b_c.d");
  EXPECT_EQ(formatValue(std::string("torchscript:/m.pt")), "torchscript:/m.pt");
  for (const char* quoted : {"", "1", "true", "No", "null", "~", "a b", "a: b", "#x", "-x",
                             "x:", ".inf", "[x]", "{x}", "*a", "&a", "!t", "'q'", "C:\\dir"}) {
    EXPECT_EQ(formatValue(std::string(quoted)).front(), '"') << quoted;
  }
  EXPECT_EQ(formatValue(std::string("a\"b\\c\nd\te\x01")), "\"a\\\"b\\\\c\\nd\\te\\x01\"");
}

}  // namespace
}  // namespace cumulus::configs
