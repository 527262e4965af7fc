#include "trainer/metrics.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace cumulus::trainer {

void JsonLine::key(const std::string& key) {
  if (!body_.empty()) body_ += ",";
  body_ += jsonQuote(key) + ":";
}

JsonLine& JsonLine::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += jsonQuote(value);
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

MetricsLog::MetricsLog(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw std::runtime_error(path + ": cannot open for writing");
}

void MetricsLog::write(const JsonLine& line) {
  out_ << line.str() << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error(path_ + ": write failed");
}

}  // namespace cumulus::trainer
