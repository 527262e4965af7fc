#pragma once
// The one way an enum's values get their names (the public options, the YAML schema's choices,
// the transports): beside the enum, in its own namespace, a table of every value with its name,
// in the order errors and docs list them, and a function that returns it,
//
//   inline constexpr std::pair<Transport, const char*> kTransportNames[] = {
//       {Transport::kAuto, "auto"}, {Transport::kTcp, "tcp"}, ...};
//   constexpr const auto& enumNames(Transport) { return kTransportNames; }
//
// which the templates below find by argument-dependent lookup. Every enum whose names are read
// back (from a flag, a YAML key, an environment variable) has such a table, so that its names
// are written once for both directions and the errors list them in one order. Names that are
// only ever printed (a dtype, an error kind, a step phase) stay exhaustive switches, which the
// compiler checks cover every value. Thread-safety: pure functions.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/suggest.h"
#include "cumulus/errors.h"

namespace cumulus::base {

// The name of `value`; "?" for a value not in its table.
template <class E>
constexpr const char* nameOf(E value) {
  for (const auto& [v, name] : enumNames(E{})) {
    if (v == value) return name;
  }
  return "?";
}

// The value named `name` (case-sensitive); nullopt for any other name.
template <class E>
constexpr std::optional<E> valueNamed(std::string_view name) {
  for (const auto& [v, n] : enumNames(E{})) {
    if (name == n) return v;
  }
  return std::nullopt;
}

// Every name, in the table's order.
template <class E>
std::vector<std::string_view> namesOf() {
  std::vector<std::string_view> names;
  for (const auto& row : enumNames(E{})) names.emplace_back(row.second);
  return names;
}

// "a, b, c": the names, for a message.
template <class E>
std::string namesText() {
  std::string text;
  for (const std::string_view name : namesOf<E>()) {
    text += (text.empty() ? "" : ", ") + std::string(name);
  }
  return text;
}

// The value named `name`; otherwise UserError
//   unknown <what> 'rng': expected one of funnel, tree, ring, hierarchical, auto; did you mean
//   'ring'?
template <class E>
E parseNamed(std::string_view name, const char* what) {
  if (const std::optional<E> value = valueNamed<E>(name)) return *value;
  std::string text = std::string("unknown ") + what + " '" + std::string(name) +
                     "': expected one of " + namesText<E>();
  const std::vector<std::string_view> names = namesOf<E>();
  const std::string guess =
      closestSpelling(name, std::vector<std::string>(names.begin(), names.end()));
  if (!guess.empty()) text += "; did you mean '" + guess + "'?";
  throw UserError(text);
}

}  // namespace cumulus::base
