#include "trainer/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace cumulus::trainer {

void JsonLine::key(const std::string& key) {
  if (!body_.empty()) body_ += ",";
  body_ += configs::jsonQuote(key) + ":";
}

JsonLine& JsonLine::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += configs::jsonQuote(value);
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    body_ += "null";
  } else {
    // %.9g keeps float32 values exact and short.
    char text[32];
    std::snprintf(text, sizeof(text), "%.9g", value);
    body_ += text;
  }
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

MetricsLog::MetricsLog(const std::string& path) : MetricsLog(path, std::ios::trunc) {}

MetricsLog::MetricsLog(const std::string& path, std::ios::openmode mode)
    : path_(path), out_(path, std::ios::out | mode) {
  if (!out_) throw std::runtime_error(path + ": cannot open for writing");
}

namespace {

// The value of "step" in one of our records (JsonLine writes `"step":N`), if it has one.
std::optional<int64_t> stepOf(const std::string& line) {
  const std::string key = "\"step\":";
  const size_t at = line.find(key);
  if (at == std::string::npos) return std::nullopt;
  const char* begin = line.c_str() + at + key.size();
  char* end = nullptr;
  const long long step = std::strtoll(begin, &end, 10);
  if (end == begin) return std::nullopt;
  return step;
}

}  // namespace

MetricsLog MetricsLog::continueAfter(const std::string& path, int64_t step) {
  std::string kept;
  {
    std::ifstream in(path);
    std::string line;
    // getline also returns a last line without its newline: a torn one (no closing brace) is
    // what a killed writer leaves, and goes.
    while (std::getline(in, line)) {
      if (line.empty() || line.back() != '}') continue;
      if (line.find("\"type\":\"summary\"") != std::string::npos) continue;
      const std::optional<int64_t> s = stepOf(line);
      if (s && *s <= step) kept += line + "\n";
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error(path + ": cannot replace it with " + tmp + ": " +
                             std::strerror(errno));
  }
  return MetricsLog(path, std::ios::app);
}

void MetricsLog::write(const JsonLine& line) {
  out_ << line.str() << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error(path_ + ": write failed");
}

}  // namespace cumulus::trainer
