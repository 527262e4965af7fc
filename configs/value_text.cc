// The text of values (schema.h): how the emitted YAML, the digest's canonical form and the error
// messages write a value, quoted only where YAML would read it as something else.
#include "configs/schema.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <string>

namespace cumulus::configs {

namespace {

bool looksSpecialToYaml(const std::string& text) {
  static const char* kWords[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"};
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  for (const char* word : kWords) {
    if (lower == word) return true;
  }
  return false;
}

// Plain (unquoted) only for path- and name-like text that no YAML reader takes for a number,
// bool or null, or for syntax: letters, digits and "_./+-", a ':' only between such characters,
// starting with a letter, '_' or '/'.
bool canBePlain(const std::string& text) {
  if (text.empty() || looksSpecialToYaml(text)) return false;
  char first = text[0];
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') || first == '_' ||
        first == '/')) {
    return false;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '/' || c == '+' || c == '-';
    if (c == ':' && i + 1 < text.size() && text[i + 1] != ':') continue;
    if (!word) return false;
  }
  return true;
}

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

std::string formatDouble(double v) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  assert(error == std::errc());
  std::string text(buffer, end);
  if (!std::isfinite(v)) return text;  // never valid in an experiment; shown in messages only
  // Keep a '.' so that every YAML reader (PyYAML's YAML 1.1 too) reads a float back.
  size_t exponent = text.find('e');
  if (text.find('.') == std::string::npos) {
    text.insert(exponent == std::string::npos ? text.size() : exponent, ".0");
  }
  return text;
}

}  // namespace

std::string formatNumber(double value) {
  std::string text = formatValue(value);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text;
}

std::string clipForMessage(const std::string& text) {
  constexpr size_t kMax = 60;
  if (text.size() <= kMax) return text;
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  return text.substr(0, cut) + "...";
}

std::string quoteForMessage(const std::string& text) { return quote(clipForMessage(text)); }

std::string formatValue(const Value& value) {
  switch (static_cast<ValueType>(value.index())) {
    case ValueType::kString: {
      const auto& text = std::get<std::string>(value);
      return canBePlain(text) ? text : quote(text);
    }
    case ValueType::kInt:
      return std::to_string(std::get<int64_t>(value));
    case ValueType::kUInt:
      return std::to_string(std::get<uint64_t>(value));
    case ValueType::kDouble:
      return formatDouble(std::get<double>(value));
    case ValueType::kBool:
      return std::get<bool>(value) ? "true" : "false";
    case ValueType::kIntList: {
      std::string text = "[";
      for (int64_t v : std::get<std::vector<int64_t>>(value)) {
        if (text.size() > 1) text += ", ";
        text += std::to_string(v);
      }
      return text + "]";
    }
  }
  return "";
}

}  // namespace cumulus::configs
