#include "base/integer.h"

#include <charconv>

namespace cumulus::base {

std::optional<int64_t> parseInteger(std::string_view text, int64_t min, int64_t max) {
  if (text.empty() || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return std::nullopt;
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || at != end || value < min || value > max) return std::nullopt;
  return value;
}

std::optional<uint64_t> parseUnsigned(std::string_view text, uint64_t max) {
  if (text.empty() || !(text[0] >= '0' && text[0] <= '9')) return std::nullopt;
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || at != end || value > max) return std::nullopt;
  return value;
}

std::string integerProblem(std::string_view text, int64_t min, int64_t max) {
  return "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
         "], got \"" + std::string(text) + "\"";
}

}  // namespace cumulus::base
